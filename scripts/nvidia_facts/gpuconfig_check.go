// gpuconfig_check: ask NVIDIA's own GpuConfig types (k8s-dra-driver-gpu) what they
// make of the opaque configs gpuops.nvidia generates. OUR program, not NVIDIA's code.
//
// Build against the driver at v25.8.1 (commit fc69d98528027bfe06efff81e6fd99c98ede8ff7),
// in this session only, never in CI; nothing built is committed:
//
//	git clone -q https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu /tmp/dra-src
//	git -C /tmp/dra-src checkout -q v25.8.1
//	mkdir -p /tmp/dra-src/cmd/gpuops-check
//	cp scripts/nvidia_facts/gpuconfig_check.go /tmp/dra-src/cmd/gpuops-check/main.go
//	cd /tmp/dra-src && GOTOOLCHAIN=local GOFLAGS=-mod=vendor go build -trimpath \
//	  -ldflags "-X github.com/NVIDIA/k8s-dra-driver-gpu/internal/info.version=v25.8.1" \
//	  -o /tmp/gpuops-check ./cmd/gpuops-check
//	python3 scripts/nvidia_facts/gpuconfig_corpus.py | /tmp/gpuops-check > out.json
//
// The -X version flag matters: pkg/featuregates parses internal/info's version
// (default "unknown", which panics) to pick the versioned gate defaults.
//
// Input: a JSON list of cases {"name", "expect", "devices", "document"}; "document" is
// handed byte-for-byte to the driver's decoder. For each case it does what the driver
// does (cmd/webhook/main.go and cmd/gpu-kubelet-plugin/device_state.go prepareDevices):
//
//  1. runtime.Decode(configapi.StrictDecoder, raw)   (unknown fields are errors)
//  2. a type switch to configapi.Interface           (GpuConfig / MigDeviceConfig / ...)
//  3. Normalize(), then Validate()                   -> "admitted" (the webhook's verdict)
//  4. for a GpuConfig, what applySharingConfig asks before touching a GPU:
//     GetTimeSlicingConfig() / GetMpsConfig(), and for MPS
//     DefaultPerDevicePinnedMemoryLimit.Normalize(uuids, DefaultPinnedDeviceMemoryLimit)
//     with 1 and with 2 fake UUIDs (sharing.go MpsControlDaemon.Start)
//
// "accepted" = admitted and step 4 passed for the case's device count ("devices", default 1).
// Feature gates TimeSlicingSettings and MPSSupport are switched on through the same
// pflag.Value the plugin's --feature-gates flag writes (pkg/flags/featuregates.go).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"

	configapi "github.com/NVIDIA/k8s-dra-driver-gpu/api/nvidia.com/resource/v1beta1"
	"github.com/NVIDIA/k8s-dra-driver-gpu/pkg/featuregates"
)

const featureGatesFlag = "TimeSlicingSettings=true,MPSSupport=true"

var fakeUUIDs = []string{
	"GPU-00000000-0000-0000-0000-000000000000",
	"GPU-11111111-1111-1111-1111-111111111111",
}

type inCase struct {
	Name     string          `json:"name"`
	Expect   string          `json:"expect"`
	Devices  int             `json:"devices,omitempty"`
	Document json.RawMessage `json:"document"`
}

type limitsResult struct {
	Limits map[string]string `json:"limits,omitempty"`
	Error  *string           `json:"error"`
}

type verdict struct {
	Name         string                  `json:"name"`
	Expect       string                  `json:"expect"`
	Devices      int                     `json:"devices"`
	Input        json.RawMessage         `json:"input"`
	Accepted     bool                    `json:"accepted"`
	Admitted     bool                    `json:"admitted"`
	Stage        string                  `json:"stage,omitempty"`
	Error        *string                 `json:"error"`
	Type         string                  `json:"type,omitempty"`
	Normalized   interface{}             `json:"normalized"`
	SharingError *string                 `json:"sharing_error"`
	MpsLimits    map[string]limitsResult `json:"mps_limits,omitempty"`
}

func strp(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

// guard turns a panic inside NVIDIA's code into an error we can record.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

func check(c inCase) verdict {
	v := verdict{Name: c.Name, Expect: c.Expect, Devices: c.Devices, Input: c.Document}
	if v.Devices == 0 {
		v.Devices = 1
	}
	fail := func(stage string, err error) verdict {
		v.Stage, v.Error = stage, strp(err)
		return v
	}

	var obj runtime.Object
	if err := guard(func() (e error) { obj, e = runtime.Decode(configapi.StrictDecoder, c.Document); return }); err != nil {
		return fail("decode", err)
	}
	v.Type = fmt.Sprintf("%T", obj)

	var cfg configapi.Interface
	switch o := obj.(type) {
	case *configapi.GpuConfig:
		cfg = o
	case *configapi.MigDeviceConfig:
		cfg = o
	case *configapi.ComputeDomainChannelConfig:
		cfg = o
	case *configapi.ComputeDomainDaemonConfig:
		cfg = o
	default:
		return fail("type", fmt.Errorf("runtime object is not a recognized configuration: %T", obj))
	}
	if err := guard(cfg.Normalize); err != nil {
		return fail("normalize", err)
	}
	v.Normalized = cfg
	if err := guard(cfg.Validate); err != nil {
		return fail("validate", err)
	}
	v.Admitted = true

	gpu, ok := obj.(*configapi.GpuConfig)
	if !ok {
		v.Accepted = true
		return v
	}
	var sharingErr error
	var mps *configapi.MpsConfig
	switch {
	case gpu.Sharing.IsTimeSlicing():
		sharingErr = guard(func() error { _, e := gpu.Sharing.GetTimeSlicingConfig(); return e })
	case gpu.Sharing.IsMps():
		sharingErr = guard(func() (e error) { mps, e = gpu.Sharing.GetMpsConfig(); return })
	}
	v.SharingError = strp(sharingErr)
	limitsOK := true
	if gpu.Sharing.IsMps() && mps != nil {
		v.MpsLimits = map[string]limitsResult{}
		for n := 1; n <= len(fakeUUIDs); n++ {
			var limits map[string]string
			err := guard(func() (e error) {
				limits, e = mps.DefaultPerDevicePinnedMemoryLimit.Normalize(fakeUUIDs[:n], mps.DefaultPinnedDeviceMemoryLimit)
				return
			})
			v.MpsLimits[fmt.Sprint(n)] = limitsResult{Limits: limits, Error: strp(err)}
			if n == v.Devices && err != nil {
				limitsOK = false
				if v.Error == nil {
					v.Stage, v.Error = "mps-limits", strp(err)
				}
			}
		}
	}
	if sharingErr != nil {
		v.Stage, v.Error = "sharing", strp(sharingErr)
	}
	v.Accepted = sharingErr == nil && limitsOK
	return v
}

func main() {
	fs := pflag.NewFlagSet("gpuops-check", pflag.ContinueOnError)
	fs.Var(featuregates.FeatureGates().(pflag.Value), "feature-gates", "")
	if err := fs.Parse([]string{"--feature-gates=" + featureGatesFlag}); err != nil {
		fmt.Fprintln(os.Stderr, "feature gates:", err)
		os.Exit(2)
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var cases []inCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		fmt.Fprintln(os.Stderr, "input:", err)
		os.Exit(2)
	}
	gates := featuregates.ToMap()
	out := map[string]interface{}{
		"feature_gates_flag": featureGatesFlag,
		"feature_gates":      gates,
		"verdicts":           []verdict{},
	}
	verdicts := make([]verdict, 0, len(cases))
	for _, c := range cases {
		verdicts = append(verdicts, check(c))
	}
	out["verdicts"] = verdicts
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
