package events

import (
	"fmt"
	"sync"
	"testing"
)

func TestOpNameTable(t *testing.T) {
	var tab OpNameTable
	if tab.Name(0) != "" || tab.Name(7) != "" || tab.Intern("") != 0 {
		t.Fatal("empty table names something")
	}
	a, b := tab.Intern("ttnn.matmul"), tab.Intern("MatmulDeviceOperation")
	if a == 0 || b == 0 || a == b || tab.Intern("ttnn.matmul") != a {
		t.Fatalf("ids %d %d", a, b)
	}
	if tab.Name(a) != "ttnn.matmul" || tab.Name(b) != "MatmulDeviceOperation" {
		t.Fatalf("names %q %q", tab.Name(a), tab.Name(b))
	}
	// Concurrent interning and reading give one id per name.
	var wg sync.WaitGroup
	ids := make([][]uint32, 4)
	for g := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := tab.Intern(fmt.Sprintf("op%d", i))
				ids[g] = append(ids[g], id)
				if n := tab.Name(id); n != fmt.Sprintf("op%d", i) {
					t.Errorf("id %d names %q", id, n)
				}
			}
		}()
	}
	wg.Wait()
	for g := 1; g < len(ids); g++ {
		for i := range ids[g] {
			if ids[g][i] != ids[0][i] {
				t.Fatalf("goroutine %d got id %d for op%d, goroutine 0 %d", g, ids[g][i], i, ids[0][i])
			}
		}
	}
}
