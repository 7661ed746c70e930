module github.com/crosstalk-project/crosstalk

go 1.26.8

require (
	github.com/digitalocean/go-libvirt v0.0.0-20260217163227-273eaa321819
	github.com/prometheus/client_golang v1.25.0
	github.com/spf13/cobra v1.10.2
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/sys v0.49.0
	libvirt.org/go/libvirtxml v1.12002.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/crypto v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
