package config

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// HTTPListen returns the http.listen a node started on the file at path
// uses: CPSGUARD_HTTP_LISTEN when set, else the file's http.listen, else the
// default. It reads nothing else and validates nothing, so `cpsguard status`
// and `cpsguard probe` find a running node even while the file on disk holds
// an edit the node refused. A file that cannot be read or is not YAML is an
// error.
func HTTPListen(path string) (string, error) {
	if v := os.Getenv(EnvPrefix + "_HTTP_LISTEN"); v != "" {
		return v, nil
	}
	data, err := readFile(path)
	if err != nil {
		return "", err
	}
	var f map[string]any
	if err := yaml.Unmarshal(data, &f); err != nil {
		return "", fmt.Errorf("config: %s: invalid YAML: %w", path, err)
	}
	// Keys are case-insensitive, as Load reads them.
	listen, _ := lookup(lookup(f, "http"), "listen").(string)
	if listen == "" {
		return Default().HTTP.Listen, nil
	}
	return listen, nil
}

// lookup returns the value of key in m, matched case-insensitively; nil
// when m is not a map or has no such key.
func lookup(m any, key string) any {
	mm, ok := m.(map[string]any)
	if !ok {
		return nil
	}
	for k, v := range mm {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}
