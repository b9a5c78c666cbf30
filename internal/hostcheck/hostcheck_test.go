package hostcheck

import "testing"

func TestAllowed(t *testing.T) {
	allowed := []string{"dash.example.com", "proxy.internal:8443", "[2001:db8::1]"}
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.1": true, "127.9.9.9:1": true, "localhost:8080": true, "LOCALHOST": true,
		"localhost.:8080": true, "app.localhost:80": true, "[::1]:8080": true, "[::1]": true, "::1": true,
		"dash.example.com": true, "DASH.example.com:9999": true, "proxy.internal:8443": true, "[2001:db8::1]:80": true,
		"": false, "evil.example": false, "evil.example:8080": false, "localhost.evil.com": false, "evil.localhost.com": false,
		"127.0.0.1.nip.io:8080": false, "0.0.0.0:8080": false, "[fe80::1]:8080": false, "2130706433": false, "127.1": false,
		"proxy.internal": false, "proxy.internal:80": false, "xdash.example.com": false, "dash.example.com.evil": false,
		"127.0.0.1:80:80": false, "evil@127.0.0.1": false, "[::2]:80": false,
	} {
		if got := Allowed(host, allowed); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Validate("--allowed-host", []string{"dash.example.com", "dash.example.com:8443", "[::1]:80", "10.0.0.5"}); err != nil {
		t.Errorf("good hosts: %v", err)
	}
	for _, h := range []string{"", "https://dash.example.com", "dash.example.com/ui", "*.example.com", "dash.example.com:https", "a b", "a\x00b", "user@host"} {
		if err := Validate("--allowed-host", []string{h}); err == nil {
			t.Errorf("Validate(%q): nil, want an error", h)
		}
	}
}
