package txbox

// reservedASCII is IsReservedHeader for an ASCII name, compared without
// lowering a copy; ok is false when name is not ASCII.
func reservedASCII(name string) (reserved, ok bool) {
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return false, false
		}
	}
	if foldEqual(name, claimCheckLower) {
		return false, true
	}
	for _, l := range reservedHeaders { // a slice: ranging over a map costs more than the compares
		if foldEqual(name, l) {
			return true, true
		}
	}
	for _, p := range reservedHeaderPrefixes {
		if len(name) >= len(p) && foldEqual(name[:len(p)], p) {
			return true, true
		}
	}
	return false, true
}

// foldEqual reports whether the ASCII name equals lower, a lower-case
// ASCII text, but for case.
func foldEqual(name, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
