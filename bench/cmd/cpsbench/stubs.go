package main

import (
	"errors"
	"flag"
)

func latencyCmd(*flag.FlagSet) func(*env) error {
	return func(*env) error { return errors.New("todo") }
}
func pacingCmd(*flag.FlagSet) func(*env) error { return func(*env) error { return errors.New("todo") } }
func decisionsCmd(*flag.FlagSet) func(*env) error {
	return func(*env) error { return errors.New("todo") }
}
func memoryCmd(*flag.FlagSet) func(*env) error { return func(*env) error { return errors.New("todo") } }
