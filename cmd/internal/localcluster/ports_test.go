package localcluster

import "testing"

// A range holding a port this process drew for a node (FreePorts), not
// yet bound, is refused though the port is free; a user's choice of
// ports (PortsFrom) still takes it.
func TestReserveRange_RefusesAPortDrawn(t *testing.T) {
	drawn, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ReserveRange(drawn[0], 1); err == nil {
		t.Errorf("ReserveRange took port %d, which FreePorts drew for this process", drawn[0])
	}
	if _, err := PortsFrom(drawn[0], 1); err != nil {
		t.Errorf("PortsFrom(%d): %v", drawn[0], err)
	}
}
