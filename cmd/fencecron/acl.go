package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/web/api"
)

const aclUsage = `usage: fencecron acl bootstrap [-addr ADDR]
       fencecron acl policy apply [-addr ADDR] [-token TOKEN] NAME FILE
       fencecron acl policy list [-addr ADDR] [-token TOKEN]
       fencecron acl policy delete [-addr ADDR] [-token TOKEN] NAME
       fencecron acl token create [-addr ADDR] [-token TOKEN] -name NAME -policy POLICY [-policy POLICY2] [-ttl DURATION]
       fencecron acl token list [-addr ADDR] [-token TOKEN]
       fencecron acl token revoke [-addr ADDR] [-token TOKEN] ACCESSOR
`

// runACL is `fencecron acl ...`: bootstrap, policies and tokens
// (/api/v1/acl).
func runACL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, aclUsage)
		return flag.ErrHelp
	}
	cmd := args[0]
	if (cmd == "policy" || cmd == "token") && len(args) > 1 {
		cmd += " " + args[1]
		args = args[1:]
	}
	args = args[1:]
	if run, ok := aclCommands[cmd]; ok {
		return run(ctx, args, stdout, stderr)
	}
	fmt.Fprint(stderr, aclUsage)
	return flag.ErrHelp
}

// aclCommands are the subcommands of `fencecron acl`, by name.
var aclCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"bootstrap":     aclBootstrap,
	"policy apply":  aclPolicyApply,
	"policy list":   aclPolicyList,
	"policy delete": aclPolicyDelete,
	"token create":  aclTokenCreate,
	"token list":    aclTokenList,
	"token revoke":  aclTokenRevoke,
}

func aclBootstrap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, err := clientFlags("acl bootstrap", args, stdout, stderr, 0, "")
	if err != nil {
		return err
	}
	var tok api.NewToken
	if err := c.do(ctx, http.MethodPost, "/api/v1/acl/bootstrap", nil, &tok); err != nil || c.json {
		return err
	}
	printToken(stdout, tok, "the management token: keep its secret, it is shown only this once")
	return nil
}

func aclPolicyApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, rest, err := clientFlags("acl policy apply", args, stdout, stderr, 2, "NAME FILE")
	if err != nil {
		return err
	}
	body, err := os.ReadFile(rest[1])
	if err != nil {
		return err
	}
	// Checked here first, for a message that names the file.
	if _, err := acl.ParsePolicy(rest[0], body); err != nil {
		return fmt.Errorf("%s: %w", rest[1], err)
	}
	var p acl.Policy
	if err := c.do(ctx, http.MethodPut, "/api/v1/acl/policies/"+url.PathEscape(rest[0]), strings.NewReader(string(body)), &p); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "policy %s applied\n", p.Name)
	return nil
}

func aclPolicyList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, err := clientFlags("acl policy list", args, stdout, stderr, 0, "")
	if err != nil {
		return err
	}
	var out struct{ Policies []acl.Policy }
	if err := c.do(ctx, http.MethodGet, "/api/v1/acl/policies", nil, &out); err != nil || c.json {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tRULES\tOPERATOR\tMANAGEMENT\t")
	for _, p := range out.Policies {
		var rules []string
		for _, r := range p.Rules {
			caps := make([]string, len(r.Capabilities))
			for i, c := range r.Capabilities {
				caps[i] = string(c)
			}
			rules = append(rules, r.Namespace+": "+strings.Join(caps, ","))
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t\n", p.Name, orNone(strings.Join(rules, "; ")), p.Operator, p.Management)
	}
	return tw.Flush()
}

func aclPolicyDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, rest, err := clientFlags("acl policy delete", args, stdout, stderr, 1, "NAME")
	if err != nil {
		return err
	}
	if err := c.do(ctx, http.MethodDelete, "/api/v1/acl/policies/"+url.PathEscape(rest[0]), nil, nil); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "policy %s deleted\n", rest[0])
	return nil
}

func aclTokenCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req api.TokenRequest
	var policies multiFlag
	c, _, err := clientFlags("acl token create", args, stdout, stderr, 0, "", func(fs *flag.FlagSet) {
		fs.StringVar(&req.Name, "name", "", "the token's name (required)")
		fs.Var(&policies, "policy", "a policy the token holds (required; repeat for more)")
		fs.StringVar(&req.TTL, "ttl", "", "how long the token lives, a Go duration such as 720h (default: until revoked)")
	})
	if err != nil {
		return err
	}
	if req.Name == "" || len(policies) == 0 {
		return fmt.Errorf("acl token create: -name and at least one -policy are required")
	}
	req.Policies = policies
	var tok api.NewToken
	if err := c.do(ctx, http.MethodPost, "/api/v1/acl/tokens", req, &tok); err != nil || c.json {
		return err
	}
	printToken(stdout, tok, "its secret is shown only this once")
	return nil
}

func aclTokenList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, err := clientFlags("acl token list", args, stdout, stderr, 0, "")
	if err != nil {
		return err
	}
	var out struct{ Tokens []acl.Token }
	if err := c.do(ctx, http.MethodGet, "/api/v1/acl/tokens", nil, &out); err != nil || c.json {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCESSOR\tNAME\tPOLICIES\tCREATED\tEXPIRES\tREVOKED\t")
	for _, t := range out.Tokens {
		pol := strings.Join(t.Policies, ",")
		if t.Management {
			pol = "(management)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Accessor, t.Name, orNone(pol), ts(t.CreatedAt), ts(t.ExpiresAt), ts(t.RevokedAt))
	}
	return tw.Flush()
}

func aclTokenRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, rest, err := clientFlags("acl token revoke", args, stdout, stderr, 1, "ACCESSOR")
	if err != nil {
		return err
	}
	if err := c.do(ctx, http.MethodDelete, "/api/v1/acl/tokens/"+url.PathEscape(rest[0]), nil, nil); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "token %s revoked\n", rest[0])
	return nil
}

func printToken(w io.Writer, t api.NewToken, note string) {
	fmt.Fprintf(w, "accessor  %s\nname      %s\nsecret    %s\n", t.Accessor, t.Name, t.Secret)
	if len(t.Policies) > 0 {
		fmt.Fprintf(w, "policies  %s\n", strings.Join(t.Policies, ","))
	}
	if !t.ExpiresAt.IsZero() {
		fmt.Fprintf(w, "expires   %s\n", ts(t.ExpiresAt))
	}
	fmt.Fprintf(w, "(%s)\n", note)
}

// multiFlag is a flag that may be given several times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
