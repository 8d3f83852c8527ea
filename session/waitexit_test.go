package session

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads: line")
	return 0
}

// Watching the end of many processes costs goroutines, not OS threads (the
// systemd unit's TasksMax), and each watch returns when its process ends.
func TestWaitExitHoldsNoThread(t *testing.T) {
	const n = 60
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	before := threads(t)
	done := make(chan int, n)
	for i, c := range cmds {
		go func() { procHost{}.WaitExit(c.Process.Pid); done <- i }()
	}
	time.Sleep(300 * time.Millisecond)
	if after := threads(t); after > before+n/4 {
		t.Errorf("%d threads while watching %d processes, %d before", after, n, before)
	}
	select {
	case i := <-done:
		t.Fatalf("watch %d returned while its process runs", i)
	default:
	}
	for _, c := range cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-done:
		case <-timeout:
			t.Fatal("a watch did not return after its process ended")
		}
	}
}
