package rdma

// HoldCQ runs fn while holding c the way a poller does (tests).
func HoldCQ(c *CQ, fn func()) {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	fn()
}
