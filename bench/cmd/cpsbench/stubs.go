package main

import (
	"errors"
	"flag"
)

func memoryCmd(*flag.FlagSet) func(*env) error { return func(*env) error { return errors.New("todo") } }
