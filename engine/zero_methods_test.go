package engine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// zeroCall is one exported method of a handle type T called on a T the
// engine did not make; it checks the answer itself (with require: it
// runs on the test goroutine).
type zeroCall[T any] struct {
	method string
	call   func(t *testing.T, v *T)
}

// checkZeroMethods calls every method of calls on a declared T and on a
// nil *T, each without a panic, and fails unless calls names every
// exported method of *T: a method added later without a check for a
// handle the engine did not make fails here.
func checkZeroMethods[T any](t *testing.T, calls []zeroCall[T]) {
	t.Helper()
	pt := reflect.TypeFor[*T]()
	var listed []string
	for _, c := range calls {
		listed = append(listed, c.method)
	}
	for i := range pt.NumMethod() {
		if name := pt.Method(i).Name; !slices.Contains(listed, name) {
			t.Errorf("%s.%s is not called on a zero value", pt.Elem().Name(), name)
		}
	}
	for _, c := range calls {
		if _, ok := pt.MethodByName(c.method); !ok {
			t.Errorf("%s has no method %s", pt.Elem().Name(), c.method)
		}
	}
	for _, v := range []struct {
		name string
		v    func() *T
	}{
		{"zero", func() *T { return new(T) }},
		{"nil", func() *T { return nil }},
	} {
		for _, c := range calls {
			t.Run(v.name+" "+c.method, func(t *testing.T) {
				x := v.v()
				require.NotPanics(t, func() { c.call(t, x) })
				require.NotPanics(t, func() { c.call(t, x) }, "a second call")
			})
		}
	}
}
