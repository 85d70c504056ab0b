// Command overrides-golden runs KubeFed's override code on a table of cases and prints the
// results as JSON: the golden file hubfed's override implementation is tested against
// (crates/hubfed-core/testdata/overrides/). `make generate` runs it.
//
//	go run . CASES.json > GOLDEN.json
//
// The code under test is KubeFed v0.10's (pkg/controller/util/overrides.go: GetOverrides'
// checks and ApplyJSONPatch, copied below unchanged but for the names) on top of the real
// github.com/evanphx/json-patch v4.12.0 and k8s.io/apimachinery's Unstructured, as KubeFed's
// sync controller calls it: on an object whose name, namespace, kind and apiVersion are set.
// Test infrastructure only: nothing of it is part of hubfed.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	jsonpatch "github.com/evanphx/json-patch"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ClusterOverride is KubeFed's util.ClusterOverride.
type ClusterOverride struct {
	Op    string      `json:"op,omitempty"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

// testCase is one row of the table: the object the overrides apply to, and the overrides of
// one cluster as they stand in a federated object's spec.overrides[].clusterOverrides.
type testCase struct {
	Name      string          `json:"name"`
	Object    json.RawMessage `json:"object"`
	Overrides json.RawMessage `json:"overrides"`
}

// outcome is one row of the golden file: the case, and either the object KubeFed would
// propagate or the error (or panic) it would report.
type outcome struct {
	Name      string          `json:"name"`
	Object    json.RawMessage `json:"object"`
	Overrides json.RawMessage `json:"overrides"`
	Result    interface{}     `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// invalidPaths is KubeFed's list of paths an override may not touch.
var invalidPaths = map[string]bool{
	"/metadata/namespace":    true,
	"/metadata/name":         true,
	"/metadata/generateName": true,
	"/kind":                  true,
}

// checkOverrides is the per-cluster part of KubeFed's GetOverrides.
func checkOverrides(clusterName string, overrides []ClusterOverride) error {
	paths := map[string]bool{}
	for i, o := range overrides {
		if invalidPaths[o.Path] {
			return fmt.Errorf("override[%d] for cluster %q has an invalid path: %s", i, clusterName, o.Path)
		}
		if paths[o.Path] {
			return fmt.Errorf("path %q appears more than once for cluster %q", o.Path, clusterName)
		}
		paths[o.Path] = true
	}
	return nil
}

// applyJSONPatch is KubeFed's util.ApplyJSONPatch.
func applyJSONPatch(obj *unstructured.Unstructured, overrides []ClusterOverride) error {
	for i, overrideItem := range overrides {
		if overrideItem.Op == "" {
			overrides[i].Op = "replace"
		}
	}
	jsonPatchBytes, err := json.Marshal(overrides)
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DecodePatch(jsonPatchBytes)
	if err != nil {
		return err
	}
	objectJSONBytes, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	patchedObjectJSONBytes, err := patch.Apply(objectJSONBytes)
	if err != nil {
		return err
	}
	return obj.UnmarshalJSON(patchedObjectJSONBytes)
}

func run(c testCase) (result interface{}, err error) {
	defer func() {
		if r := recover(); r != nil {
			result, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(c.Object); err != nil {
		return nil, fmt.Errorf("bad case object: %v", err)
	}
	// KubeFed reads the overrides from the federated object by a JSON round trip into its
	// Go types (UnstructuredToInterface): numbers in values become float64.
	var overrides []ClusterOverride
	if err := json.Unmarshal(c.Overrides, &overrides); err != nil {
		return nil, fmt.Errorf("bad case overrides: %v", err)
	}
	if err := checkOverrides("c1", overrides); err != nil {
		return nil, err
	}
	if err := applyJSONPatch(obj, overrides); err != nil {
		return nil, err
	}
	return obj.Object, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: overrides-golden CASES.json > GOLDEN.json")
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
		o := outcome{Name: c.Name, Object: c.Object, Overrides: c.Overrides}
		result, err := run(c)
		if err != nil {
			o.Error = err.Error()
		} else {
			o.Result = result
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
