package txboxtest_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestImports: txboxtest imports only txbox's core packages and the
// standard library, and depends on no database library or broker SDK, so
// that a user's tests compile nothing more than their program does.
func TestImports(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json", "github.com/txbox/txbox/txboxtest").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var p struct{ Imports, Deps []string }
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	adapters := []string{"natsjs", "natsembed", "rabbitmq", "redisstream", "txboxasynq", "kafka", "txboxpgx", "cmd", "tests"}
	for _, imp := range p.Imports {
		if rest, ok := strings.CutPrefix(imp, "github.com/txbox/txbox/"); ok {
			for _, a := range adapters {
				if rest == a || strings.HasPrefix(rest, a+"/") {
					t.Errorf("txboxtest imports %s, outside the core", imp)
				}
			}
			continue
		}
		if imp != "github.com/txbox/txbox" && strings.Contains(strings.Split(imp, "/")[0], ".") {
			t.Errorf("txboxtest imports %s: only the core and the standard library", imp)
		}
	}
	for _, d := range p.Deps {
		first := strings.Split(d, "/")[0]
		if strings.Contains(first, ".") && !strings.HasPrefix(d, "github.com/txbox/txbox") && d != "github.com/google/uuid" {
			t.Errorf("txboxtest depends on %s: the core depends on google/uuid alone", d)
		}
	}
	if len(p.Imports) < 5 {
		t.Fatalf("go list found only %v", p.Imports)
	}
}
