package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func TestCBPool(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			d, _ := openFake(t, m, hlsys.Accel, "6.8")
			p := d.NewCBPool(4096, 2)
			base := d.Stats().Live

			a, err := p.Get()
			require.NoError(t, err)
			require.Equal(t, 4096, a.Cap())
			require.NoError(t, a.AddNOP(0))
			b, err := p.Get()
			require.NoError(t, err)
			c, err := p.Get()
			require.NoError(t, err)
			require.Equal(t, base+3, d.Stats().Live)

			p.Put(a)
			p.Put(b)
			p.Put(c) // the pool is full: closed
			require.Equal(t, 2, p.Len())
			require.Equal(t, base+2, d.Stats().Live)

			got, err := p.Get()
			require.NoError(t, err)
			require.Contains(t, []*CB{a, b}, got, "a pooled CB is reused")
			require.Zero(t, got.Len(), "emptied")

			require.NoError(t, got.Close())
			p.Put(got) // released already: dropped
			require.Equal(t, 1, p.Len())

			other, _ := openFake(t, m, hlsys.Accel, "6.8")
			foreign, err := other.NewCB(4096)
			require.NoError(t, err)
			p.Put(foreign) // another device's: closed, not kept
			require.Equal(t, 1, p.Len())
			require.Zero(t, other.Stats().Live)

			require.NoError(t, p.Close())
			require.NoError(t, p.Close())
			require.Zero(t, p.Len())
			require.Equal(t, base, d.Stats().Live)
			late, err := p.Get() // a closed pool still makes CBs...
			require.NoError(t, err)
			p.Put(late) // ...but keeps none
			require.Zero(t, p.Len())
			require.Equal(t, base, d.Stats().Live)
			p.Put(nil)
		})
	}
}
