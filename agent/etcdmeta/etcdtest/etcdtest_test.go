package etcdtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func client(t *testing.T, s *Server) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStopRestart(t *testing.T) {
	s := New(t)
	require.True(t, s.Running())
	c := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, err := c.Put(ctx, "k", "v1")
	require.NoError(t, err)
	w := c.Watch(ctx, "k", clientv3.WithRev(pr.Header.Revision+1))

	require.NoError(t, s.Stop())
	require.False(t, s.Running())
	require.NoError(t, s.Stop(), "Stop of a stopped server")
	short, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Get(short, "k")
	cancel2()
	require.Error(t, err, "etcd is stopped")

	require.NoError(t, s.Restart())
	require.NoError(t, s.Restart(), "Restart of a running server")
	r, err := c.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, r.Kvs, 1)
	require.Equal(t, "v1", string(r.Kvs[0].Value), "data survives a restart")
	_, err = c.Put(ctx, "k", "v2")
	require.NoError(t, err)
	for ev := range w {
		require.NoError(t, ev.Err())
		if len(ev.Events) > 0 {
			require.Equal(t, "v2", string(ev.Events[0].Kv.Value), "the watch resumes after the restart")
			break
		}
	}
}

func TestStartOwnDirRemoved(t *testing.T) {
	s, err := Start("")
	require.NoError(t, err)
	dir := s.Dir()
	_, err = os.Stat(dir)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "Close removes the directory Start made: %v", err)
	require.Error(t, s.Restart(), "a closed server does not restart")
}

func TestPauseResume(t *testing.T) {
	s := New(t)
	c := client(t, s)
	direct, err := clientv3.New(clientv3.Config{Endpoints: s.DirectEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer direct.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Put(ctx, "k", "v1")
	require.NoError(t, err)

	s.Pause()
	s.Pause()
	require.True(t, s.Running())
	short, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Get(short, "k")
	cancel2()
	require.Error(t, err, "paused: unreachable through the relay")
	_, err = direct.Put(ctx, "k", "v2")
	require.NoError(t, err, "paused: reachable directly")

	require.NoError(t, s.Resume())
	require.NoError(t, s.Resume())
	r, err := c.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v2", string(r.Kvs[0].Value))
	s.Pause()
	require.NoError(t, s.Stop(), "Stop of a paused server")
	require.NoError(t, s.Resume(), "Resume of a stopped server is a no-op")
	require.False(t, s.Running())
}
