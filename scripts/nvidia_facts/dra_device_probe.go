// dra_device_probe: print, for every GPU, what NVIDIA's DRA kubelet plugin would read and publish for it.
// OUR program, not NVIDIA's code: it makes the same go-nvml / go-nvlib calls, in the same order, as
// getGpuInfo in kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1 (commit fc69d98528027bfe06efff81e6fd99c98ede8ff7,
// cmd/gpu-kubelet-plugin/nvlib.go), and formats them as GpuInfo.GetDevice does (cmd/gpu-kubelet-plugin/deviceinfo.go):
// device name gpu-<minor>, versions through Masterminds/semver, the capacity memory as
// resource.NewQuantity(memory.Total, BinarySI). It reads only; it changes no GPU setting. MIG devices are not
// enumerated (it reports migEnabled; the plugin publishes a MIG-enabled GPU's MIG devices instead of the GPU).
//
// Build against the driver's vendored go-nvml/go-nvlib at v25.8.1, in a session only, never in CI; nothing built
// is committed (build/ is git-ignored):
//
//	git clone -q https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu /tmp/dra-src
//	git -C /tmp/dra-src checkout -q v25.8.1
//	mkdir -p /tmp/dra-src/cmd/gpuops-probe
//	cp scripts/nvidia_facts/dra_device_probe.go /tmp/dra-src/cmd/gpuops-probe/main.go
//	cd /tmp/dra-src && GOTOOLCHAIN=local GOFLAGS=-mod=vendor CGO_ENABLED=1 go build -trimpath \
//	  -o <checkout>/build/dra-probe/dra-probe ./cmd/gpuops-probe
//
// It imports no feature-gates package, so no -X internal/info.version flag is needed. go-nvml opens
// libnvidia-ml.so.1 at run time (dlopen): it builds on a machine without the driver.
//
// Usage: dra-probe [QUANTITY ...] > probe.json
// Each QUANTITY (e.g. 85520809984, the literal of a template's
// device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('...')) == 0 selector) is parsed with
// resource.ParseQuantity and compared with each GPU's published memory capacity by Quantity.Cmp, which is what
// the CEL quantity library's compareTo calls: quantityCmp[QUANTITY] is -1, 0 or 1 per GPU.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/Masterminds/semver"
	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/resource"
)

type gpu struct {
	Index                 int            `json:"index"`
	Minor                 int            `json:"minor"`
	DeviceName            string         `json:"deviceName"`
	UUID                  string         `json:"uuid"`
	MigEnabled            bool           `json:"migEnabled"`
	MemoryBytes           uint64         `json:"memoryBytes"`
	MemoryQuantity        string         `json:"memoryQuantity"`
	ProductName           string         `json:"productName"`
	Architecture          string         `json:"architecture"`
	Brand                 string         `json:"brand"`
	CudaComputeCapability string         `json:"cudaComputeCapability"`
	DriverVersion         string         `json:"driverVersion"`
	CudaDriverVersion     string         `json:"cudaDriverVersion"`
	PcieBusID             string         `json:"pcieBusID"`
	Published             map[string]any `json:"published"`
	QuantityCmp           map[string]int `json:"quantityCmp,omitempty"`
}

type report struct {
	Source string   `json:"source"`
	Count  int      `json:"count"`
	Errors []string `json:"errors"`
	Gpus   []gpu    `json:"gpus"`
}

// version is what GetDevice publishes for a VersionValue: semver.MustParse(s).String(), without the panic.
func version(s string) string {
	v, err := semver.NewVersion(s)
	if err != nil {
		return "unparsable: " + err.Error()
	}
	return v.String()
}

func main() {
	out := report{Source: "kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1 getGpuInfo calls", Errors: []string{}, Gpus: []gpu{}}
	quantities := map[string]resource.Quantity{}
	for _, arg := range os.Args[1:] {
		q, err := resource.ParseQuantity(arg)
		if err != nil {
			out.Errors = append(out.Errors, fmt.Sprintf("quantity %q: %v", arg, err))
			continue
		}
		quantities[arg] = q
	}
	nvmllib := nvml.New()
	if ret := nvmllib.Init(); ret != nvml.SUCCESS {
		out.Errors = append(out.Errors, fmt.Sprintf("error initializing NVML: %v", ret))
		emit(out, 2)
	}
	lib := nvdev.New(nvmllib)

	err := lib.VisitDevices(func(index int, device nvdev.Device) error {
		minor, ret := device.GetMinorNumber()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting minor number for device %d: %v", index, ret)
		}
		uuid, ret := device.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting UUID for device %d: %v", index, ret)
		}
		migEnabled, err := device.IsMigEnabled()
		if err != nil {
			return fmt.Errorf("error checking if MIG mode enabled for device %d: %w", index, err)
		}
		memory, ret := device.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting memory info for device %d: %v", index, ret)
		}
		productName, ret := device.GetName()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting product name for device %d: %v", index, ret)
		}
		architecture, err := device.GetArchitectureAsString()
		if err != nil {
			return fmt.Errorf("error getting architecture for device %d: %w", index, err)
		}
		brand, err := device.GetBrandAsString()
		if err != nil {
			return fmt.Errorf("error getting brand for device %d: %w", index, err)
		}
		cc, err := device.GetCudaComputeCapabilityAsString()
		if err != nil {
			return fmt.Errorf("error getting CUDA compute capability for device %d: %w", index, err)
		}
		driverVersion, ret := nvmllib.SystemGetDriverVersion()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting driver version: %v", ret)
		}
		cudaDriverVersion, ret := nvmllib.SystemGetCudaDriverVersion()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("error getting CUDA driver version: %v", ret)
		}
		pcieBusID, err := device.GetPCIBusID()
		if err != nil {
			return fmt.Errorf("error getting PCIe bus ID for device %d: %w", index, err)
		}
		qty := resource.NewQuantity(int64(memory.Total), resource.BinarySI)
		g := gpu{
			Index:                 index,
			Minor:                 minor,
			DeviceName:            fmt.Sprintf("gpu-%d", minor), // GpuInfo.CanonicalName
			UUID:                  uuid,
			MigEnabled:            migEnabled,
			MemoryBytes:           memory.Total,
			MemoryQuantity:        qty.String(),
			ProductName:           productName,
			Architecture:          architecture,
			Brand:                 brand,
			CudaComputeCapability: cc,
			DriverVersion:         driverVersion,
			CudaDriverVersion:     fmt.Sprintf("%v.%v", cudaDriverVersion/1000, (cudaDriverVersion%1000)/10),
			PcieBusID:             pcieBusID,
		}
		// The attributes and capacity GetDevice would publish for this GPU (MIG disabled), pcieRoot left out.
		g.Published = map[string]any{
			"name": g.DeviceName,
			"attributes": map[string]string{
				"type":                  "gpu",
				"uuid":                  g.UUID,
				"productName":           g.ProductName,
				"brand":                 g.Brand,
				"architecture":          g.Architecture,
				"cudaComputeCapability": version(g.CudaComputeCapability),
				"driverVersion":         version(g.DriverVersion),
				"cudaDriverVersion":     version(g.CudaDriverVersion),
				"pcieBusID":             g.PcieBusID,
			},
			"capacity": map[string]string{"memory": qty.String()},
		}
		if len(quantities) > 0 {
			g.QuantityCmp = map[string]int{}
			for arg, q := range quantities {
				g.QuantityCmp[arg] = qty.Cmp(q)
			}
		}
		out.Gpus = append(out.Gpus, g)
		return nil
	})
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	if ret := nvmllib.Shutdown(); ret != nvml.SUCCESS {
		out.Errors = append(out.Errors, fmt.Sprintf("error shutting down NVML: %v", ret))
	}
	out.Count = len(out.Gpus)
	if len(out.Errors) > 0 {
		emit(out, 1)
	}
	emit(out, 0)
}

func emit(out report, rc int) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		rc = 3
	}
	os.Exit(rc)
}
