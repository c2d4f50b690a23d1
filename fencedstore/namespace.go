package fencedstore

import "strings"

// Namespaces partition jobs, and with them the store's keys. A job of the
// default namespace is named plainly ("report") and writes where jobs
// always have; a job of namespace NS is named "NS:report" and its keys
// live under "ns/NS/". A namespace's name is a DNS label (jobs validates
// it), so it holds neither ':' nor '/'.
const (
	// DefaultNamespace is the namespace of a job that names none.
	DefaultNamespace = "default"
	// NamespaceSep separates a namespace from a job's name in a
	// qualified name ("billing:report").
	NamespaceSep = ":"
	// NamespaceKeyRoot starts every key of a namespace other than the
	// default one. Keys below it belong to the namespace named by their
	// next segment, and to no job of another namespace.
	NamespaceKeyRoot = "ns/"
)

// JobNamespace returns the namespace of a job by its qualified name: the
// part before NamespaceSep, or DefaultNamespace for a plain name.
func JobNamespace(job string) string {
	if ns, _, ok := strings.Cut(job, NamespaceSep); ok && ns != "" {
		return ns
	}
	return DefaultNamespace
}

// NamespacePrefix returns the key prefix of namespace ns: "" for the
// default namespace (and ""), whose keys are where they always were, and
// "ns/NS/" for any other.
func NamespacePrefix(ns string) string {
	if ns == "" || ns == DefaultNamespace {
		return ""
	}
	return NamespaceKeyRoot + ns + "/"
}

// KeyNamespace returns the namespace a key belongs to: NS for a key
// under "ns/NS/" (or the key "ns/NS" itself), DefaultNamespace for every
// other key.
func KeyNamespace(key string) string {
	rest, ok := strings.CutPrefix(key, NamespaceKeyRoot)
	if !ok {
		return DefaultNamespace
	}
	ns, _, _ := strings.Cut(rest, "/")
	return ns
}
