package memcache_test

import (
	"fmt"

	"github.com/gxfer/gxfer/memcache"
)

// toyRegistrar stands in for a real registrar (an ibv_reg_mr, a Gaudi MMU
// mapping): it hands out increasing keys and prints what it does.
type toyRegistrar struct{ next int }

func (t *toyRegistrar) Register(addr, length uint64, access memcache.Access) (any, error) {
	t.next++
	fmt.Printf("register   [%#x, %#x) %v -> key %d\n", addr, addr+length, access, t.next)
	return t.next, nil
}

func (t *toyRegistrar) Deregister(addr, length uint64, value any) error {
	fmt.Printf("deregister [%#x, %#x) key %d\n", addr, addr+length, value)
	return nil
}

func Example() {
	c, err := memcache.New(memcache.Config{
		Registrar: &toyRegistrar{},
		Align:     4096, // register whole pages
		Merge:     true,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// The first Get registers the page(s); a second one inside is a hit.
	r, _ := c.Get(0x10010, 100, memcache.AccessRead)
	fmt.Println("key", r.Value())
	r2, _ := c.Get(0x10800, 8, memcache.AccessRead)
	fmt.Println("same region:", r2 == r)
	c.Put(r2)
	c.Put(r) // still cached, ready for the next Get

	// The buffer is about to be freed: drop its registration.
	c.Invalidate(0x10000, 4096)
	fmt.Printf("regions: %d, hits: %d\n", c.Stats().Regions, c.Stats().HitsFast)

	// Output:
	// register   [0x10000, 0x11000) read -> key 1
	// key 1
	// same region: true
	// deregister [0x10000, 0x11000) key 1
	// regions: 0, hits: 1
}
