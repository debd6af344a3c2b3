// Prints what Go's time.ParseDuration (the parser behind gogo jsonpb's
// google.protobuf.Duration, so behind Istio's YAML) makes of each line of
// go_durations.txt: the line's input, a tab, then the duration in proto3's
// canonical JSON form ("0.300s") or "error". With -check it compares
// instead of printing, and exits 1 on a difference. tests/schema/oracle.py
// holds libmcp-schema to the same file.
//
//	go run go_durations.go [-check] go_durations.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// proto3's JSON form of a Duration: seconds and nanoseconds of the same
// sign, 0, 3, 6 or 9 fraction digits (as protobuf's own printers write it).
func canonical(d time.Duration) string {
	ns := int64(d)
	sign := ""
	u := uint64(ns)
	if ns < 0 {
		sign = "-"
		u = uint64(-ns) // -(-2^63) wraps to 2^63, which uint64 holds
	}
	s, n := u/1e9, u%1e9
	switch {
	case n == 0:
		return fmt.Sprintf("%s%ds", sign, s)
	case n%1e6 == 0:
		return fmt.Sprintf("%s%d.%03ds", sign, s, n/1e6)
	case n%1e3 == 0:
		return fmt.Sprintf("%s%d.%06ds", sign, s, n/1e3)
	}
	return fmt.Sprintf("%s%d.%09ds", sign, s, n)
}

func main() {
	check := flag.Bool("check", false, "compare with the file instead of printing")
	flag.Parse()
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bad := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			if !*check {
				fmt.Println(line)
			}
			continue
		}
		in, want, _ := strings.Cut(line, "\t")
		got := "error"
		if d, err := time.ParseDuration(in); err == nil {
			got = canonical(d)
		}
		if !*check {
			fmt.Printf("%s\t%s\n", in, got)
		} else if got != want {
			fmt.Printf("%q: Go gives %s, the file says %s\n", in, got, want)
			bad++
		}
	}
	if *check {
		fmt.Printf("go_durations: %d differences\n", bad)
	}
	if bad > 0 {
		os.Exit(1)
	}
}
