// Package config owns cpsguard's configuration: the YAML schema of DESIGN.md
// ("Configuration"), its defaults, CPSGUARD_ environment overrides, strict
// decoding, validation, and hot reload. It is the only package that imports
// viper; everything else sees plain, immutable *Config snapshots.
//
// # Loading
//
// [Load] reads a file, [Parse] reads bytes. Both decode strictly (an unknown
// key such as max_wiat is an error, with a suggestion) and validate every
// rule, returning a *[ValidationError] that lists every problem at once,
// each naming its path: "carriers[1].cps: must be > 0 (got -3)". A file that
// cannot be read is a plain wrapped os error; one larger than [MaxFileSize]
// is refused unparsed.
//
// Every scalar setting can be overridden by CPSGUARD_ + its path in upper
// case (CPSGUARD_STORE_REDIS_PASSWORD, CPSGUARD_HTTP_LISTEN,
// CPSGUARD_SIP_LISTEN="udp://0.0.0.0:5060,tcp://0.0.0.0:5060"), even when
// the file lacks the key. Setting any CPSGUARD_STORE_REDIS_* variable
// creates the store.redis block, i.e. selects Redis.
//
// Names of peers, customers and carriers are 1-64 characters of
// [A-Za-z0-9._-] (they become Redis key parts and metric labels). Route names
// are case-insensitive and kept in lower case, because viper folds map keys.
//
// Peer sources may overlap only when one prefix is more specific than the
// other; the longest prefix wins ([Config.PeerByAddr]). The same prefix on
// two peers is an error.
//
// Each problem also has its place: [ValidationError.Where] holds the line
// and column of the key or list item it is about (`cpsguard check` prints
// "FILE:LINE:COLUMN: path: message"), and a YAML syntax error is reported on
// the line where the file stops being YAML, not where the enclosing block
// starts, as the YAML library says. A value set by an environment variable
// is named by the variable instead: "CPSGUARD_SIP_REJECT_CODE
// (sip.reject.code): must be an integer (got "busy")".
//
// A CPSGUARD_ variable that overrides no setting is an error with a
// suggestion ("CPSGUARD_HTTP_LISTN: … (did you mean
// "CPSGUARD_HTTP_LISTEN"?)"), except [ToolEnvVars] (CPSGUARD_CONFIG, test
// tooling) and the variables Kubernetes gives a pod for a Service named
// cpsguard (CPSGUARD_SERVICE_HOST, CPSGUARD_PORT_9090_TCP, …).
//
// docs/configuration.md is the key reference (every key, its type, default
// and whether a reload applies it); a test generates it from this
// package's schema and fails when it differs.
//
// # Reload
//
// A [Manager] holds the running *Config in an atomic pointer.
// [Manager.ReloadBy] (SIGHUP, the HTTP API) and [Manager.Watch] (file
// changes, including the rename-replace done by editors and Kubernetes
// ConfigMaps) decode, validate and swap. A reload is logged with what
// triggered it ("sighup", "file", "api"), the key paths that changed (never
// a value) and the new config hash. An invalid file keeps the last good
// Config running, is logged once with all its errors, is counted and is
// reported to [Manager.OnReload] observers as "failure". Settings that
// cannot change at runtime ([RestartOnly]) keep their running value; the
// change is logged and listed by [Manager.PendingRestart].
//
// # Secrets
//
// store.redis.password, http.token and sip.dialog_secret never appear in
// [Config.Summary], [Config.LogValue], the String forms of [Redis], [HTTP]
// and [SIP], or [Config.Redacted].
//
// # Concurrency
//
// A *Config is immutable once loaded and safe for concurrent reads. A
// Manager is safe for concurrent use; reloads are serialised.
package config
