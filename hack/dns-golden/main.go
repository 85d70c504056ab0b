// Command dns-golden runs KubeFed v0.6.1's own DNSEndpoint code on a table of
// ServiceDNSRecords and IngressDNSRecords and prints the endpoints as JSON: the golden file
// hubfed's multi-cluster DNS decisions are tested against (crates/hubfed-core/testdata/dns/).
// `make generate` runs it.
//
//	go run . CASES.json > GOLDEN.json
//
// The code under test is KubeFed's, imported from its module unchanged:
// pkg/controller/dnsendpoint's getServiceDNSEndpoints and getIngressDNSEndpoints (record names,
// CNAME fallback, host name resolution, DedupeAndMergeEndpoints), reached with go:linkname
// since they are unexported, with its package-level NetWrapper replaced by a table of each
// case's host names, as KubeFed's own tests replace it with NetWrapperMock. A host name missing
// from the table fails to resolve. Test infrastructure only: nothing of it is part of hubfed.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	_ "unsafe" // go:linkname

	feddnsv1a1 "sigs.k8s.io/kubefed/pkg/apis/multiclusterdns/v1alpha1"
	"sigs.k8s.io/kubefed/pkg/controller/dnsendpoint"
)

//go:linkname getServiceDNSEndpoints sigs.k8s.io/kubefed/pkg/controller/dnsendpoint.getServiceDNSEndpoints
func getServiceDNSEndpoints(obj interface{}) ([]*feddnsv1a1.Endpoint, error)

//go:linkname getIngressDNSEndpoints sigs.k8s.io/kubefed/pkg/controller/dnsendpoint.getIngressDNSEndpoints
func getIngressDNSEndpoints(obj interface{}) ([]*feddnsv1a1.Endpoint, error)

//go:linkname netWrapper sigs.k8s.io/kubefed/pkg/controller/dnsendpoint.netWrapper
var netWrapper dnsendpoint.NetWrapper

// hostTable resolves the host names of one case.
type hostTable map[string][]string

func (t hostTable) LookupHost(host string) ([]string, error) {
	if addrs, ok := t[host]; ok {
		return addrs, nil
	}
	return nil, errors.New("no such host")
}

// testCase is one row of the table: a record of `kind` (service or ingress), the host names
// its load balancers resolve to, and, when hubfed deliberately differs, how.
type testCase struct {
	Name       string          `json:"name"`
	Kind       string          `json:"kind"`
	Record     json.RawMessage `json:"record"`
	Hosts      hostTable       `json:"hosts"`
	Difference string          `json:"difference,omitempty"`
}

// outcome is one row of the golden file: the case, and KubeFed's endpoints or error.
type outcome struct {
	testCase
	Endpoints []*feddnsv1a1.Endpoint `json:"endpoints"`
	Error     string                 `json:"error,omitempty"`
}

func run(c testCase) ([]*feddnsv1a1.Endpoint, error) {
	netWrapper = c.Hosts
	switch c.Kind {
	case "service":
		var record feddnsv1a1.ServiceDNSRecord
		if err := json.Unmarshal(c.Record, &record); err != nil {
			return nil, fmt.Errorf("bad case record: %v", err)
		}
		return getServiceDNSEndpoints(&record)
	case "ingress":
		var record feddnsv1a1.IngressDNSRecord
		if err := json.Unmarshal(c.Record, &record); err != nil {
			return nil, fmt.Errorf("bad case record: %v", err)
		}
		return getIngressDNSEndpoints(&record)
	}
	return nil, fmt.Errorf("unknown kind %q", c.Kind)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dns-golden CASES.json > GOLDEN.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	var cases []testCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		fmt.Fprintln(os.Stderr, "error: reading", os.Args[1]+":", err)
		os.Exit(1)
	}
	out := make([]outcome, 0, len(cases))
	for _, c := range cases {
		o := outcome{testCase: c}
		endpoints, err := run(c)
		if err != nil {
			o.Error = err.Error()
		} else {
			o.Endpoints = endpoints
		}
		out = append(out, o)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
