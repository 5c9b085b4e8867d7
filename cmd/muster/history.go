package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
)

// tracedHelp ends the help of every command that makes an operator write.
const tracedHelp = `The write is traced: "muster history <service>" shows who made it (the etcd
user of --user, else the local user), when, from where, and the value before
and after.`

// untracedNote ends every history: what the journal cannot hold.
const untracedNote = "note: writes made with etcdctl or any other etcd client directly are not traced"

func newHistoryCmd(g *globalOptions) *cobra.Command {
	var output string
	var limit int
	cmd := &cobra.Command{
		Use:   "history [service]",
		Short: "Show who changed what: the traced operator writes of a service, or of all",
		Long: `History lists the operator writes of a service (or, without one, of every
service), newest first: when (UTC), who, from where (command, console or
library), what (drain, weight, undrain, deregister, canary, canary off,
policy set, policy clear), the instance if any, and the value before and
after. Each record was written by etcd in the same transaction as the change
it traces, so a change has its record and a record its change; REV is that
transaction's revision.

Who is the console's logged-in user ("admin token" for the token), or for the
command the etcd user (--user), else the local user; a program calling
registry/etcd records its etcd user, else its OS user, unless it names one.

The registry keeps the last 100 records per service (a ring under
<prefix>.history/<service>/, bound to no lease; the library's
WithJournalSize changes the size). Reading it needs read permission on
<prefix>.history/ and no admin credential. Writes made with etcdctl or any
other etcd client directly leave no record, and the output ends by saying so
(on stderr with -o json, whose output is an array of the records: "seq",
"time", "who", "source", "action", "service", "instance", "before" and
"after" as stored, and "revision").`,
		Example: `  muster history user
  muster history
  muster history user --limit 10 -o json`,
		Args: serviceArg(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			if limit < 0 {
				return usageErrorf("--limit %d: want 0 (all) or more", limit)
			}
			service := ""
			if len(args) == 1 {
				service = args[0]
			}
			return runHistory(cmd.Context(), g, output, service, limit, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many records, the newest (0: all)")
	return cmd
}

func runHistory(ctx context.Context, g *globalOptions, output, service string, limit int, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	hr, ok := s.admin.(registry.HistoryReader)
	if !ok {
		return usageErrorf("--registry %s: history reads the journal of operator writes, which %s does not keep "+
			"(its Admin is no registry.HistoryReader)", g.registry, s.where())
	}
	recs, err := hr.History(ctx, service, limit)
	if err != nil {
		return s.fail(ctx, "read the history of "+orAll(service), err)
	}
	if output == outputJSON {
		if recs == nil {
			recs = []registry.Record{}
		}
		if err := writeJSON(stdout, recs); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stderr, untracedNote)
		return err
	}
	if err := writeHistory(stdout, service, recs); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, untracedNote)
	return err
}

// orAll names service, or "every service" for "".
func orAll(service string) string {
	if service == "" {
		return "every service"
	}
	return service
}

// writeHistory writes the records as a table, with a SERVICE column when
// they are of every service (service == "").
func writeHistory(w io.Writer, service string, recs []registry.Record) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "no traced writes of %s\n", orAll(service))
		return err
	}
	tw := newTable(w)
	head := "TIME\tWHO\tSOURCE\tACTION\tINSTANCE\tBEFORE\tAFTER\tREV"
	if service == "" {
		head = "TIME\tSERVICE\tWHO\tSOURCE\tACTION\tINSTANCE\tBEFORE\tAFTER\tREV"
	}
	fmt.Fprintln(tw, head)
	for _, r := range recs {
		before, after := r.Describe()
		row := []string{r.Time.UTC().Format(time.RFC3339), textCell(r.Who), textCell(r.Source), textCell(r.Action),
			cell(r.Instance), textCell(before), textCell(after), strconv.FormatInt(r.Revision, 10)}
		if service == "" {
			row = append(row[:1], append([]string{cell(r.Service)}, row[1:]...)...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// textCell makes s, which may hold spaces, safe for a table cell: "-" when
// empty, quoted when it holds tabs, line breaks or unprintable characters.
func textCell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if r != ' ' && (unicode.IsSpace(r) || !unicode.IsPrint(r)) {
			return strconv.Quote(s)
		}
	}
	return s
}
