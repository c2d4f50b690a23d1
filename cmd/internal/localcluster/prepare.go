package localcluster

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
)

// Prepare lays out a cluster (node names, free ports, data directories,
// log files) but writes no config and starts nothing, so the caller can
// change where the nodes listen and how their processes run before
// StartAll: cmd/fencecheck puts every node in its own network namespace
// and routes store traffic through a proxy. Config renders the file Start
// would write.
func Prepare(o Options) (*Cluster, error) {
	if o.Profile == "" {
		o.Profile = "default"
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Opts: o, Secret: "localcluster-" + rand.Text()}
	var names []string
	for i := 1; i <= o.Servers; i++ {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	for i := 1; i <= o.Workers; i++ {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	if o.StoreNode {
		names = append(names, "store")
	}
	var from []int
	if o.BasePort != 0 {
		var err error
		if from, err = PortsFrom(o.BasePort, 3*len(names)); err != nil {
			return nil, err
		}
	}
	for i, name := range names {
		ports := from[min(3*i, len(from)):min(3*i+3, len(from))]
		if len(ports) == 0 {
			var err error
			if ports, err = FreePorts(3); err != nil {
				return nil, err
			}
		}
		c.Nodes = append(c.Nodes, &Node{
			Name: name, Server: i < o.Servers, Store: name == "store",
			HTTP: ports[0], Gossip: ports[1], Raft: ports[2],
			ConfigPath: filepath.Join(o.Dir, name+".yaml"),
			DataDir:    filepath.Join(o.Dir, "data", name),
			LogPath:    filepath.Join(o.Dir, name+".log"),
			binary:     o.Binary,
			env:        o.Env[name],
			secret:     c.Secret,
		})
	}
	return c, nil
}

// Config returns node n's config file as Start writes it: every address
// is 127.0.0.1 with the node's own ports.
func (c *Cluster) Config(n *Node) string { return c.config(n) }

// SetCommand makes the node run path (with the usual arguments, "agent
// -config FILE") and adds env to its environment, from its next Start:
// a wrapper that enters a namespace, for example.
func (n *Node) SetCommand(path string, env ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.binary = path
	n.env = append(n.env, env...)
}

// StartAll starts every node that is not running; if one fails, the nodes
// started are killed.
func (c *Cluster) StartAll() error {
	for _, n := range c.Nodes {
		if n.Running() {
			continue
		}
		if err := n.Start(); err != nil {
			c.Stop()
			return fmt.Errorf("start %s: %w", n.Name, err)
		}
	}
	return nil
}
