// Command psa-check evaluates every pod and pod template in the given manifest files against the
// "restricted" Pod Security Standard at version "latest", with the evaluator the API server's own
// admission plugin uses (k8s.io/pod-security-admission), offline.
//
//	psa-check FILE.yaml...
//
// It prints one line per violation (file, kind/name, the check's reason and detail) and exits 1
// when there is any, 2 when a file cannot be read or decoded, 0 otherwise (after one summary line
// naming how many pod specs it evaluated, so that "nothing found" is not mistaken for "all good").
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// A document's pod: where its metadata and spec sit depends on the kind.
type podTemplate struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     corev1.PodSpec    `json:"spec"`
}

type document struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     json.RawMessage   `json:"spec"`
}

// The pod a document runs, if any: a Pod itself, a workload's template, a CronJob's job's template.
func podOf(d document) (*podTemplate, error) {
	if len(d.Spec) == 0 {
		return nil, nil
	}
	switch d.Kind {
	case "Pod":
		var spec corev1.PodSpec
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			return nil, fmt.Errorf("decode the pod spec: %w", err)
		}
		return &podTemplate{Metadata: d.Metadata, Spec: spec}, nil
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController":
		var spec struct {
			Template podTemplate `json:"template"`
		}
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			return nil, fmt.Errorf("decode the pod template: %w", err)
		}
		return &spec.Template, nil
	case "CronJob":
		var spec struct {
			JobTemplate struct {
				Spec struct {
					Template podTemplate `json:"template"`
				} `json:"spec"`
			} `json:"jobTemplate"`
		}
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			return nil, fmt.Errorf("decode the job template: %w", err)
		}
		return &spec.JobTemplate.Spec.Template, nil
	}
	return nil, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: psa-check FILE.yaml...")
		os.Exit(2)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the pod security evaluator: %v\n", err)
		os.Exit(2)
	}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	pods, violations := 0, 0
	for _, path := range os.Args[1:] {
		text, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "read %s: %v\n", path, err)
			os.Exit(2)
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
		for {
			var d document
			if err := decoder.Decode(&d); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				fmt.Fprintf(os.Stderr, "decode %s: %v\n", path, err)
				os.Exit(2)
			}
			pod, err := podOf(d)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %s/%s: %v\n", path, d.Kind, d.Metadata.Name, err)
				os.Exit(2)
			}
			if pod == nil {
				continue
			}
			pods++
			for _, r := range evaluator.EvaluatePod(restricted, &pod.Metadata, &pod.Spec) {
				if !r.Allowed {
					violations++
					fmt.Printf("%s: %s/%s: %s: %s\n", path, d.Kind, d.Metadata.Name, r.ForbiddenReason, r.ForbiddenDetail)
				}
			}
		}
	}
	fmt.Printf("evaluated %d pod specs against restricted:latest: %d violations\n", pods, violations)
	if violations > 0 {
		os.Exit(1)
	}
}
