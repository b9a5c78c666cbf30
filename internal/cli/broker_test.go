package cli

import "testing"

// With no broker and no stream named, the embedded server gets the stream
// TXBOX capturing txbox.>, and topics get the prefix txbox.
func TestEmbeddedDefaultStream(t *testing.T) {
	f := brokerFlags{natsListen: DefaultNATSListen}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	if f.stream != DefaultStream || f.streamSubjects != "txbox.>" || f.subjectPrefix != "txbox." {
		t.Fatalf("defaults: stream %q subjects %q prefix %q", f.stream, f.streamSubjects, f.subjectPrefix)
	}
	f = brokerFlags{natsListen: DefaultNATSListen, subjectPrefix: "shop."}
	if err := f.check(); err != nil || f.streamSubjects != "shop.>" {
		t.Fatalf("prefix shop.: subjects %q, err %v", f.streamSubjects, err)
	}
}
