package config

import (
	"fmt"
	"io"
	"os"
)

// MaxFileSize is the largest configuration file read, in bytes (8 MiB,
// some 80,000 one-line peers). A larger file is refused unparsed: parsing
// holds ten to seventy times a file's size, so a log or a dump written to
// the configuration's path by mistake would otherwise cost a running node
// its memory on the next reload.
const MaxFileSize = 8 << 20

// readFile reads the configuration file at path, at most MaxFileSize
// bytes of it (a path that never ends, such as /dev/zero, included). Its
// errors say "config: cannot read file"; an os error is wrapped.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: cannot read file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: cannot read file: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("config: cannot read file: %s is larger than %d MiB (config.MaxFileSize): not a configuration", path, MaxFileSize>>20)
	}
	return data, nil
}
