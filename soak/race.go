//go:build race

package soak

// raceMaps: the race detector maps shadow memory as the heap grows.
const raceMaps = 256
