package sipparse

import (
	"errors"
	"fmt"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// nameAddress is sipgo's parse state of a name-addr (parse_address.go);
// here it stays on the stack (sipgo's ParseAddressValue allocates it).
type nameAddress struct {
	displayName  string
	uri          *sipmsg.Uri
	headerParams *sipmsg.HeaderParams
}

// The states of sipgo's address parser, one function each there.
type addressState uint8

const (
	addressDone addressState = iota
	addressDisplayName
	addressDisplayNameQuoted
	addressURIBracket
	addressURI
	addressHeaderParams
)

// parseAddressValue is sipmsg.ParseAddressValue.
func parseAddressValue(addressText string, uri *sipmsg.Uri, headerParams *sipmsg.HeaderParams) (displayName string, err error) {
	if len(addressText) == 0 {
		return "", errors.New("Empty Address")
	}
	a := nameAddress{uri: uri, headerParams: headerParams}
	state := addressDisplayName
	str := addressText
	for state != addressDone {
		switch state {
		case addressDisplayName:
			state, str, err = addressStateDisplayName(&a, str)
		case addressDisplayNameQuoted:
			state, str, err = addressStateDisplayNameQuoted(&a, str)
		case addressURIBracket:
			state, str, err = addressStateURIBracket(&a, str)
		case addressURI:
			state, str, err = addressStateURI(&a, str)
		case addressHeaderParams:
			state, str, err = addressStateHeaderParams(&a, str)
		}
		if err != nil {
			break
		}
	}
	return a.displayName, err
}

func addressStateDisplayName(a *nameAddress, s string) (addressState, string, error) {
	for i, c := range s {
		if c == '"' {
			return addressDisplayNameQuoted, s[i+1:], nil
		}
		if c == '<' {
			a.displayName = strings.TrimSpace(s[:i])
			return addressURIBracket, s[i+1:], nil
		}
		if c == ';' {
			return addressURI, s, nil
		}
	}
	return addressURI, s, nil
}

func addressStateDisplayNameQuoted(a *nameAddress, s string) (addressState, string, error) {
	var escaped bool
	for i, c := range s {
		if c == '\\' {
			escaped = !escaped
			continue
		}
		if escaped {
			if c == 0xA || c == 0x0D {
				return addressDone, s, fmt.Errorf("invalid display name, not allowed to escape '0x%02X' in '%s'", c, s)
			}
			escaped = false
			continue
		}
		if c == '"' {
			a.displayName = s[:i]
			s = s[i+1:]
			for i, c := range s {
				if c == '<' {
					return addressURIBracket, s[i+1:], nil
				}
				if c == ';' {
					return addressURI, s[i+1:], nil
				}
			}
			return addressDone, s, fmt.Errorf("no uri after display name")
		}
	}
	return addressDone, s, fmt.Errorf("invalid uri display name inside quotes")
}

func addressStateURIBracket(a *nameAddress, s string) (addressState, string, error) {
	if len(s) == 0 {
		return addressDone, s, errors.New("No URI present")
	}
	for i, c := range s {
		if c == '>' {
			err := sipmsg.ParseUri(s[:i], a.uri)
			return addressHeaderParams, s[i+1:], err
		}
	}
	return addressDone, s, fmt.Errorf("invalid uri, missing end bracket")
}

func addressStateURI(a *nameAddress, s string) (addressState, string, error) {
	if len(s) == 0 {
		return addressDone, s, errors.New("No URI present")
	}
	for i, c := range s {
		if c == ';' {
			err := sipmsg.ParseUri(s[:i], a.uri)
			return addressHeaderParams, s[i+1:], err
		}
	}
	err := sipmsg.ParseUri(s, a.uri)
	return addressDone, s, err
}

func addressStateHeaderParams(a *nameAddress, s string) (addressState, string, error) {
	equal := -1
	for i, c := range s {
		if c == '=' {
			equal = i
			continue
		}
		if c == ';' {
			a.addParam(equal, s[:i])
			return addressHeaderParams, s[i+1:], nil
		}
	}
	a.addParam(equal, s)
	return addressDone, s, nil
}

func (a *nameAddress) addParam(equal int, s string) {
	if equal > 0 {
		if a.headerParams != nil {
			a.headerParams.Add(s[:equal], s[equal+1:])
		}
		return
	}
	if len(s) == 0 {
		return
	}
	if a.headerParams != nil {
		a.headerParams.Add(s, "")
	}
}
