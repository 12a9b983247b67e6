package testutil

import (
	"reflect"
	"testing"
)

// CheckAddCounters checks a stats type's AddCounters: add(&s, o) must add
// every counter field of o to s and leave the gauges (named) untouched.
// Every field is set by reflection, so a counter added to the type later
// and forgotten by AddCounters fails the check. The fields must be
// integers.
func CheckAddCounters[T any](t testing.TB, add func(*T, T), gauges ...string) {
	t.Helper()
	isGauge := map[string]bool{}
	for _, g := range gauges {
		isGauge[g] = true
	}
	var o T
	ov := reflect.ValueOf(&o).Elem()
	for i := range ov.NumField() {
		switch f := ov.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Int:
			f.SetInt(int64(i + 1))
		default:
			t.Fatalf("field %s is a %s: CheckAddCounters handles integers only", ov.Type().Field(i).Name, f.Kind())
		}
	}
	var s T
	add(&s, o)
	add(&s, o)
	sv := reflect.ValueOf(s)
	for i := range sv.NumField() {
		name, f := sv.Type().Field(i).Name, sv.Field(i)
		var got uint64
		if f.Kind() == reflect.Int {
			got = uint64(f.Int())
		} else {
			got = f.Uint()
		}
		switch {
		case isGauge[name] && got != 0:
			t.Errorf("gauge %s was added (%d)", name, got)
		case !isGauge[name] && got != 2*uint64(i+1):
			t.Errorf("counter %s: %d after adding %d twice", name, got, i+1)
		}
	}
}
