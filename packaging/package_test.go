// Package packaging_test builds what `make install`, `make release` and
// `make deb` produce and checks their contents, metadata and maintainer
// scripts.
package packaging_test

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const version = "0.1.0~test1"

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	tmp := t.TempDir()
	dest := filepath.Join(tmp, "root")
	install := func() string {
		return run(t, "..", nil, "make", "install", "DESTDIR="+dest, "BIN="+filepath.Join(tmp, "crosstalk"))
	}
	install()
	for p, want := range map[string]os.FileMode{
		"usr/bin/crosstalk":                                  0o755,
		"lib/systemd/system/crosstalk.service":               0o644,
		"etc/crosstalk/crosstalk.yaml":                       0o644,
		"usr/lib/modules-load.d/crosstalk.conf":              0o644,
		"usr/share/doc/crosstalk/README.md":                  0o644,
		"usr/share/doc/crosstalk/CHANGELOG.md":               0o644,
		"usr/share/doc/crosstalk/DEPLOY.md":                  0o644,
		"usr/share/doc/crosstalk/docs/agent.md":              0o644,
		"usr/share/man/man1/crosstalk.1":                     0o644,
		"usr/share/man/man1/crosstalk-lab-run.1":             0o644,
		"usr/share/bash-completion/completions/crosstalk":    0o644,
		"usr/share/zsh/vendor-completions/_crosstalk":        0o644,
		"usr/share/fish/vendor_completions.d/crosstalk.fish": 0o644,
		"var/lib/crosstalk":                                  os.ModeDir | 0o700,
	} {
		if got := mode(t, filepath.Join(dest, p)); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dest, "etc/crosstalk/crosstalk.yaml"))
	example, _ := os.ReadFile("../examples/crosstalk.yaml")
	if string(conf) != string(example) {
		t.Error("the installed configuration is not the documented example")
	}
	checkManAndCompletions(t, dest, "")
	out := run(t, "..", nil, filepath.Join(dest, "usr/bin/crosstalk"), "version")
	if !strings.HasPrefix(out, "crosstalk ") {
		t.Errorf("installed binary: %q", out)
	}
	// A second install keeps an edited configuration.
	edited := filepath.Join(dest, "etc/crosstalk/crosstalk.yaml")
	os.WriteFile(edited, []byte("interval: 1s\n"), 0o644)
	if out := install(); !strings.Contains(out, "kept") {
		t.Errorf("reinstall output: %s", out)
	}
	if b, _ := os.ReadFile(edited); string(b) != "interval: 1s\n" {
		t.Error("reinstall overwrote the operator's configuration")
	}
	if _, err := os.Stat(edited + ".dist"); err != nil {
		t.Errorf("new default not put beside it: %v", err)
	}

	// PREFIX moves the binary, and the unit follows it.
	dest2 := filepath.Join(tmp, "root2")
	run(t, "..", nil, "make", "install", "DESTDIR="+dest2, "PREFIX=/usr/local", "SYSTEMDUNITDIR=/etc/systemd/system", "BIN="+filepath.Join(tmp, "crosstalk"))
	unit, err := os.ReadFile(filepath.Join(dest2, "etc/systemd/system/crosstalk.service"))
	if err != nil || !strings.Contains(string(unit), "ExecStart=/usr/local/bin/crosstalk run") || !strings.Contains(string(unit), "ExecStopPost=/usr/local/bin/crosstalk restore") {
		t.Errorf("unit under PREFIX=/usr/local: %v\n%s", err, unit)
	}
}

func TestReleaseVersion(t *testing.T) {
	out := strings.TrimSpace(run(t, "..", nil, "scripts/release-version.sh"))
	base, _ := os.ReadFile("VERSION")
	// Either a tag on HEAD, or the snapshot form.
	re := regexp.MustCompile(`^(\d+\.\d+\.\d+|` + regexp.QuoteMeta(strings.TrimSpace(string(base))) + `~git\d{8}\.[0-9a-f]{7,}(\+dirty)?)$`)
	if !re.MatchString(out) {
		t.Errorf("release version %q", out)
	}
}

func TestReleaseTarball(t *testing.T) {
	dist := t.TempDir()
	build := func() (string, []byte) {
		out := strings.TrimSpace(run(t, "..", nil, "scripts/release.sh", "tarball", version, "abc1234", dist))
		path := out[strings.LastIndex(out, "\n")+1:]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return path, b
	}
	path, first := build()
	name := "crosstalk-" + version + "-linux-" + runtime()
	if filepath.Base(path) != name+".tar.gz" {
		t.Errorf("tarball named %s", filepath.Base(path))
	}
	list := strings.Fields(run(t, dist, nil, "tar", "-tzf", path))
	for _, want := range []string{
		"crosstalk", "install.sh", "crosstalk.yaml", "systemd/crosstalk.service", "modules-load.d/crosstalk.conf",
		"kubernetes/daemonset.yaml", "kubernetes/rbac.yaml", "helm/crosstalk/Chart.yaml", "helm/crosstalk/templates/daemonset.yaml",
		"monitoring/prometheus/crosstalk-rules.yml", "monitoring/prometheus/crosstalk-rules_test.yml",
		"monitoring/grafana/crosstalk-host.json", "monitoring/grafana/crosstalk-fleet.json",
		"README.md", "CHANGELOG.md", "deploy-README.md", "Containerfile", "docs/agent.md", "docs/metrics.md",
		"man/crosstalk.1", "man/crosstalk-lab-run.1", "completions/crosstalk.bash", "completions/_crosstalk", "completions/crosstalk.fish",
	} {
		if !slices.Contains(list, name+"/"+want) {
			t.Errorf("tarball lacks %s", want)
		}
	}
	for _, f := range list {
		if strings.HasSuffix(f, "_test.go") {
			t.Errorf("tarball ships a Go test: %s", f)
		}
	}
	verbose := run(t, dist, nil, "tar", "-tvzf", path)
	if !regexp.MustCompile(`(?m)^-rwxr-xr-x 0/0 .* ` + regexp.QuoteMeta(name) + `/crosstalk$`).MatchString(verbose) {
		t.Errorf("binary not executable and owned by 0/0:\n%s", verbose)
	}
	if regexp.MustCompile(`(?m)^\S+ [1-9]\d*/`).MatchString(verbose) {
		t.Errorf("files not owned by root in the tarball:\n%s", verbose)
	}
	// The binary inside says which release it is.
	run(t, dist, nil, "tar", "-xzf", path)
	var v map[string]string
	if err := json.Unmarshal([]byte(run(t, dist, nil, filepath.Join(dist, name, "crosstalk"), "version", "--json")), &v); err != nil || v["version"] != version || v["commit"] != "abc1234" {
		t.Errorf("version --json: %v %v", v, err)
	}
	// The tarball installs with its own install.sh.
	dest := filepath.Join(dist, "root")
	run(t, filepath.Join(dist, name), []string{"DESTDIR=" + dest}, "./install.sh")
	for _, p := range []string{"usr/bin/crosstalk", "lib/systemd/system/crosstalk.service", "etc/crosstalk/crosstalk.yaml", "usr/share/doc/crosstalk/DEPLOY.md", "var/lib/crosstalk"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("install.sh from the tarball: %v", err)
		}
	}
	checkManAndCompletions(t, dest, version)
	// Reproducible: the same commit gives the same bytes.
	_, second := build()
	if sha256.Sum256(first) != sha256.Sum256(second) {
		t.Error("two builds of the same tree gave different tarballs")
	}
	if b, err := os.ReadFile(path + ".sha256"); err != nil || !strings.Contains(string(b), filepath.Base(path)) {
		t.Errorf("checksum file: %v %s", err, b)
	}
}

// checkManAndCompletions checks what install.sh put under dest/usr/share:
// the man pages (of release version, when one is given) and a completion
// script per shell, each the file the binary generated.
func checkManAndCompletions(t *testing.T, dest, version string) {
	t.Helper()
	share := filepath.Join(dest, "usr/share")
	page, err := os.ReadFile(filepath.Join(share, "man/man1/crosstalk.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `.TH "CROSSTALK" "1" `) || !strings.Contains(string(page), `\fBcrosstalk-lab(1)\fP`) {
		t.Errorf("crosstalk.1:\n%.400s", page)
	}
	if version != "" && !strings.Contains(string(page), `"crosstalk `+version+`"`) {
		t.Errorf("crosstalk.1 does not name release %s:\n%.200s", version, page)
	}
	pages, _ := filepath.Glob(filepath.Join(share, "man/man1/crosstalk*.1"))
	if len(pages) < 10 {
		t.Errorf("man pages: %v", pages)
	}
	for path, want := range map[string]string{
		"bash-completion/completions/crosstalk":    "complete -o default -F __start_crosstalk crosstalk",
		"zsh/vendor-completions/_crosstalk":        "#compdef crosstalk",
		"fish/vendor_completions.d/crosstalk.fish": "complete -c crosstalk ",
	} {
		if b, err := os.ReadFile(filepath.Join(share, path)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %v, lacks %q", path, err, want)
		}
	}
}

func runtime() string {
	out, _ := exec.Command("go", "env", "GOARCH").Output()
	return strings.TrimSpace(string(out))
}

func TestDebianPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed (apt-get install dpkg)")
	}
	dist := t.TempDir()
	out := strings.TrimSpace(run(t, "..", nil, "scripts/release.sh", "deb", version, "abc1234", dist))
	deb := out[strings.LastIndex(out, "\n")+1:]
	if filepath.Base(deb) != "crosstalk_"+version+"_"+runtime()+".deb" {
		t.Errorf("package named %s", filepath.Base(deb))
	}
	info := run(t, dist, nil, "dpkg-deb", "-I", deb)
	for _, want := range []string{"Package: crosstalk", "Version: " + version, "Architecture: " + runtime(), "Installed-Size: ", "Maintainer: ", "Section: admin", " postinst", " prerm", " postrm", " conffiles", " md5sums"} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb -I lacks %q:\n%s", want, info)
		}
	}
	if cf := run(t, dist, nil, "dpkg-deb", "-f", deb, "Package"); strings.TrimSpace(cf) != "crosstalk" {
		t.Errorf("control Package = %q", cf)
	}
	contents := run(t, dist, nil, "dpkg-deb", "-c", deb)
	for path, perm := range map[string]string{
		"./usr/bin/crosstalk":                                             "-rwxr-xr-x root/root",
		"./lib/systemd/system/crosstalk.service":                          "-rw-r--r-- root/root",
		"./etc/crosstalk/crosstalk.yaml":                                  "-rw-r--r-- root/root",
		"./usr/lib/modules-load.d/crosstalk.conf":                         "-rw-r--r-- root/root",
		"./usr/share/doc/crosstalk/README.md":                             "-rw-r--r-- root/root",
		"./usr/share/doc/crosstalk/docs/lab.md":                           "-rw-r--r-- root/root",
		"./usr/share/crosstalk/kubernetes/daemonset.yaml":                 "-rw-r--r-- root/root",
		"./usr/share/crosstalk/helm/crosstalk/Chart.yaml":                 "-rw-r--r-- root/root",
		"./usr/share/crosstalk/monitoring/grafana/crosstalk-fleet.json":   "-rw-r--r-- root/root",
		"./usr/share/crosstalk/monitoring/prometheus/crosstalk-rules.yml": "-rw-r--r-- root/root",
		"./usr/share/man/man1/crosstalk.1.gz":                             "-rw-r--r-- root/root",
		"./usr/share/man/man1/crosstalk-lab-run.1.gz":                     "-rw-r--r-- root/root",
		"./usr/share/bash-completion/completions/crosstalk":               "-rw-r--r-- root/root",
		"./usr/share/zsh/vendor-completions/_crosstalk":                   "-rw-r--r-- root/root",
		"./usr/share/fish/vendor_completions.d/crosstalk.fish":            "-rw-r--r-- root/root",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(perm) + `\s.*\s` + regexp.QuoteMeta(path) + `$`).MatchString(contents) {
			t.Errorf("dpkg-deb -c: no %s %s", perm, path)
		}
	}
	if strings.Contains(contents, "./var/lib/crosstalk") {
		t.Error("the package ships the state directory; postinst creates it")
	}

	// Maintainer scripts: valid sh; conffiles; run under DPKG_ROOT (an
	// offline install: no systemctl) they create and purge the state dir.
	ctl := filepath.Join(dist, "control")
	run(t, dist, nil, "dpkg-deb", "-e", deb, ctl)
	if b, _ := os.ReadFile(filepath.Join(ctl, "conffiles")); strings.TrimSpace(string(b)) != "/etc/crosstalk/crosstalk.yaml" {
		t.Errorf("conffiles: %q", b)
	}
	bin := filepath.Join(dist, "bin")
	os.MkdirAll(bin, 0o755)
	calls := filepath.Join(dist, "systemctl-calls")
	os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\n"), 0o755)
	root := filepath.Join(dist, "dpkgroot")
	env := []string{"DPKG_ROOT=" + root, "PATH=" + bin + ":" + os.Getenv("PATH")}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		run(t, ctl, nil, "sh", "-n", s)
		if mode(t, filepath.Join(ctl, s))&0o111 == 0 {
			t.Errorf("%s is not executable", s)
		}
	}
	run(t, ctl, env, "./postinst", "configure")
	if got := mode(t, filepath.Join(root, "var/lib/crosstalk")); got != os.ModeDir|0o700 {
		t.Errorf("postinst state dir mode %v", got)
	}
	run(t, ctl, env, "./prerm", "upgrade")
	run(t, ctl, env, "./postrm", "purge")
	if _, err := os.Stat(filepath.Join(root, "var/lib/crosstalk")); !os.IsNotExist(err) {
		t.Errorf("purge left the state dir: %v", err)
	}
	if _, err := os.Stat(calls); err == nil {
		b, _ := os.ReadFile(calls)
		t.Errorf("maintainer scripts called systemctl without a running systemd: %s", b)
	}
	// The scripts stop the unit before the binary goes, and start it after.
	pre, _ := os.ReadFile(filepath.Join(ctl, "prerm"))
	post, _ := os.ReadFile(filepath.Join(ctl, "postinst"))
	if !strings.Contains(string(pre), "systemctl stop crosstalk.service") || !strings.Contains(string(pre), "crosstalk restore") ||
		!strings.Contains(string(post), "[ -d /run/systemd/system ]") || !strings.Contains(string(post), "systemctl enable crosstalk.service") {
		t.Error("maintainer scripts lost their stop/restore/enable steps")
	}

	// The unpacked package holds a working binary of the right version.
	x := filepath.Join(dist, "x")
	run(t, dist, nil, "dpkg-deb", "-x", deb, x)
	if out := run(t, dist, nil, filepath.Join(x, "usr/bin/crosstalk"), "version"); out != "crosstalk "+version+" (commit abc1234)\n" {
		t.Errorf("packaged binary: %q", out)
	}
	if out := run(t, dist, nil, "gzip", "-dc", filepath.Join(x, "usr/share/man/man1/crosstalk.1.gz")); !strings.Contains(out, `.TH "CROSSTALK" "1" `) {
		t.Errorf("packaged man page:\n%.300s", out)
	}
	if sums, _ := os.ReadFile(filepath.Join(ctl, "md5sums")); !strings.Contains(string(sums), "usr/share/man/man1/crosstalk.1.gz") {
		t.Error("md5sums lacks the man page")
	}
}
