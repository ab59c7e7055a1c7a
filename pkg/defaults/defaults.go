package defaults

// Number is what a limit, count or duration (time.Duration included) is.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64
}

// Positive returns v when it is set (greater than zero), else def.
func Positive[T Number](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
