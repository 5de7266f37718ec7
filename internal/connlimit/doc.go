// Package connlimit holds what the node's connection bounds share (the SIP
// TCP/TLS listeners in package sip, the HTTP listener in package httpapi):
// the key a source's connections are counted under, and a connection that
// gives its listener's place back when closed. The bounds themselves stay
// with their listeners, which count under their own locks.
//
// Nothing here fails or blocks; everything is safe for concurrent use.
package connlimit
