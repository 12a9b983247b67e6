//go:build !race

package soak

const raceMaps = 0
