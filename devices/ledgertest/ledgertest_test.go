package ledgertest

import (
	"math/rand/v2"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// Every stream the ledger takes passes; random ones from the fuzzer's
// mapping (fixed seed), with its rules interacting.
func TestCheckRandomStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		data := make([]byte, rng.IntN(9*400))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		l := devices.NewLedger(devices.Options{})
		for _, e := range devicestest.FuzzEvents(data) {
			l.Apply(&e)
			if err := Check(l); err != nil {
				t.Fatalf("stream %d after %s seq %d: %v", i, e.Kind, e.Seq, err)
			}
		}
	}
}

// Summaries that disagree with themselves are caught: a total with no
// buffer behind it, a peak below its value, an accounting fault.
func TestCheckCatches(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	e := devicestest.Alloc(1, 0xa0, 0, events.DRAM, 0x1000, 4096)
	e.Pid, e.Seq, e.TsNs = 10, 1, 100
	l.Apply(&e)
	if err := Check(l); err != nil {
		t.Fatal(err)
	}
	for name, spoil := range map[string]func(p *devices.ProcessSummary){
		"total":      func(p *devices.ProcessSummary) { p.Devices[0].DRAMBytes += 1 },
		"count":      func(p *devices.ProcessSummary) { p.Devices[0].LiveBuffers = 2 },
		"peak":       func(p *devices.ProcessSummary) { p.Devices[0].Peaks.DRAMBytes.Value = 10 },
		"accounting": func(p *devices.ProcessSummary) { p.AnomalyCounts["internal_accounting_error"] = 1 },
		"chip":       func(p *devices.ProcessSummary) { p.Devices = nil },
	} {
		s := l.Summary()
		spoil(&s.Processes[0])
		if err := CheckSummary(&s); err == nil {
			t.Errorf("%s: a spoiled summary passes", name)
		}
	}
}
