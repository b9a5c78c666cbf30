package printable_test

import (
	"fmt"

	"github.com/txbox/txbox/internal/printable"
)

func ExampleCell() {
	fmt.Println(printable.Cell("order.\u202eplaced\x1b[31m\nx"))
	fmt.Println(printable.Text("line one\nline\ttwo"))
	// Output:
	// order.\u202eplaced\x1b[31m\nx
	// line one
	// line\ttwo
}
