package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
)

// setting is a numeric flag, with the environment variable that is its
// default (none if env is ""), and the range its value must lie in. A flag
// the user set wins over the variable, which is then not even parsed.
type setting[T int | time.Duration] struct {
	flag, env string
	min, max  T    // max 0: no upper bound
	zero      bool // 0 is allowed besides [min, max] (it means "off" or "none")
}

// resolve stores the flag's value in dst if the user set the flag, else
// the variable's if it is set, else leaves dst alone. A value that does not
// parse or lies out of range is an error naming the flag or the variable.
func (s setting[T]) resolve(fs *pflag.FlagSet, v T, dst *T) error {
	var src string
	switch raw, from, ok := lookupEnv(s.env); {
	case fs.Changed(s.flag):
		src = fmt.Sprintf("--%s %v", s.flag, v)
	case s.env != "" && ok:
		src = fmt.Sprintf("%s=%q", from, raw)
		var err error
		if v, err = parseSetting[T](raw); err != nil {
			return fmt.Errorf("%w: %s: %v", txbox.ErrInvalidConfig, src, err)
		}
	default:
		return nil
	}
	if err := s.check(v, fs.Changed(s.flag)); err != nil {
		return fmt.Errorf("%w: %s: %v", txbox.ErrInvalidConfig, src, err)
	}
	*dst = v
	return nil
}

// resolveBool sets *dst from the flag when it was given, else from the
// variable env when it is set (true/false, 1/0), else leaves it.
func resolveBool(fs *pflag.FlagSet, flag, env string, v bool, dst *bool) error {
	if fs.Changed(flag) {
		*dst = v
		return nil
	}
	raw, from, ok := lookupEnv(env)
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return fmt.Errorf("%w: %s=%q: want true or false", txbox.ErrInvalidConfig, from, raw)
	}
	*dst = b
	return nil
}

// validate checks v, the flag's value, with an error naming the flag.
func (s setting[T]) validate(v T) error {
	if err := s.check(v, true); err != nil {
		return fmt.Errorf("--%s %v: %w", s.flag, v, err)
	}
	return nil
}

// check checks v, from the flag or (fromFlag false) the variable.
func (s setting[T]) check(v T, fromFlag bool) error {
	_, isInt := any(v).(int)
	switch {
	case v == 0 && s.zero:
		return nil
	case v < 0 && s.zero:
		return fmt.Errorf("must be positive, or 0")
	case v <= 0 && isInt && fromFlag:
		return fmt.Errorf("must be a positive integer")
	case v <= 0 && isInt:
		return fmt.Errorf("want a positive integer")
	case v <= 0:
		return fmt.Errorf("must be positive")
	case v < s.min:
		return fmt.Errorf("must be at least %v", s.min)
	case s.max != 0 && v > s.max:
		return fmt.Errorf("must be at most %v", s.max)
	}
	return nil
}

func parseSetting[T int | time.Duration](raw string) (T, error) {
	var v T
	switch p := any(&v).(type) {
	case *int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return 0, fmt.Errorf("want a positive integer")
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return 0, fmt.Errorf("not a duration (want e.g. 500ms, 1s, 168h)")
		}
		*p = d
	}
	return v, nil
}

// sourceOf names where a string flag's value came from: --flag if the user
// set it (or fs is nil), else the variable env if it is set.
func sourceOf(fs *pflag.FlagSet, flag, env string) string {
	if fs == nil || fs.Changed(flag) || env == "" {
		return "--" + flag
	}
	if _, from, ok := lookupEnv(env); ok {
		return from
	}
	return "--" + flag
}
