package tcp

import "sync"

// putQueue holds a connection's host Puts waiting to be sent (startPut,
// drainPuts): pushed by their callers, popped in order by the one drain
// task that runs while any wait, removed by an abandon that comes first.
type putQueue struct {
	mu       sync.Mutex
	q        []*op // waiting: q[head:]
	head     int
	draining bool // a drain task runs (started by the push that found none)
}

// push queues o and reports whether the caller must start the drain task.
func (pq *putQueue) push(o *op) (start bool) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	pq.q = append(pq.q, o)
	start = !pq.draining
	pq.draining = true
	return start
}

// pop takes the next Put, or, with none left, ends the drain (nil).
func (pq *putQueue) pop() *op {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if pq.head == len(pq.q) {
		pq.q, pq.head = pq.q[:0], 0 // the array is kept for the next pushes
		pq.draining = false
		return nil
	}
	o := pq.q[pq.head]
	pq.q[pq.head] = nil
	pq.head++
	if pq.head >= compactAt && 2*pq.head >= len(pq.q) {
		// A queue that never empties (the pipeline always full) would
		// otherwise grow its array by every Put pushed: move the waiting
		// ones to the front.
		n := copy(pq.q, pq.q[pq.head:])
		clear(pq.q[n:])
		pq.q, pq.head = pq.q[:n], 0
	}
	return o
}

// compactAt is how many Puts pop takes from the front of the array
// before it moves the waiting ones down (when they are at most as many).
const compactAt = 32

// remove takes o out of the queue if it is still waiting there.
func (pq *putQueue) remove(o *op) bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for i := pq.head; i < len(pq.q); i++ {
		if pq.q[i] == o {
			copy(pq.q[i:], pq.q[i+1:])
			pq.q[len(pq.q)-1] = nil
			pq.q = pq.q[:len(pq.q)-1]
			return true
		}
	}
	return false
}

// waiting is the number of queued Puts (tests).
func (pq *putQueue) waiting() int {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return len(pq.q) - pq.head
}
