package records

import (
	"errors"
	"os"
	"path/filepath"

	"gopkg.in/natefinch/lumberjack.v2"
)

// fileOutput is the JSON-lines file, rotated by size by lumberjack: when a
// write would take it past max_size_mb, the file is renamed
// NAME-<timestamp>.EXT and a new one started; max_backups rotated files
// are kept.
type fileOutput struct{ l *lumberjack.Logger }

// openFile checks that path can be written (creating it and its directory
// as lumberjack would) and returns its output.
func openFile(path string, maxSizeMB, maxBackups int) (*fileOutput, error) {
	if path == "" {
		return nil, errors.New("records: empty file path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	_ = f.Close()
	return &fileOutput{l: &lumberjack.Logger{Filename: path, MaxSize: maxSizeMB, MaxBackups: maxBackups, LocalTime: false}}, nil
}

func (o *fileOutput) write(batch []byte, n int) (int, error) {
	if _, err := o.l.Write(batch); err != nil {
		return n, err
	}
	return 0, nil
}

func (o *fileOutput) close() error { return o.l.Close() }
