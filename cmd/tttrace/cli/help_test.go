package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/ttmetal"
)

// The help states the budget of reading a process's allocators as the
// code has it.
func TestHelpStatesAllocBudget(t *testing.T) {
	var out bytes.Buffer
	if _, err := Parse([]string{"--help"}, &out); err != nil {
		t.Fatal(err)
	}
	help := strings.Join(strings.Fields(out.String()), " ")
	want := fmt.Sprintf("at most %d MiB in %d reads of it, and free lists of %d blocks in all, per process",
		ttmetal.AllocBudgetBytes>>20, ttmetal.AllocBudgetReads, ttmetal.AllocBudgetBlocks)
	if !strings.Contains(help, want) {
		t.Errorf("help says not %q:\n%s", want, out.String())
	}
	if !strings.Contains(help, "only on the devices it is seen holding open") {
		t.Errorf("help says not how a process counts on a physical chip")
	}
}
