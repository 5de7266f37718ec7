package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// stubbed runs install-deps.sh with PATH holding only stubs of id, sudo,
// apt-get and dpkg-deb (each appending its command line to a log), the
// commands of present, and the few real tools the script needs. It
// returns the log, one command per line.
func stubbed(t *testing.T, uid string, present ...string) (log []string, policy, promdir string) {
	t.Helper()
	return stubbedSbin(t, uid, nil, present...)
}

// stubbedSbin is stubbed with the commands of sbin in a directory off PATH
// that the script is told (SBIN_DIRS) holds system binaries, as /usr/sbin
// is for an ordinary Debian user.
func stubbedSbin(t *testing.T, uid string, sbin []string, present ...string) (log []string, policy, promdir string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	promdir = filepath.Join(dir, "local-bin")
	policy = filepath.Join(dir, "policy-rc.d")
	logPath := filepath.Join(dir, "log")
	sbinDir := filepath.Join(dir, "sbin")
	for _, d := range []string{bin, promdir, sbinDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"bash", "mktemp", "rm", "ls", "tar", "install", "cat", "mkdir", "chmod", "env", "dirname"} {
		// A skip under CI=true would pass make test without ever running
		// the script that installs the other tools: Require fails there.
		p := redistest.Require(t, tool)
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	stub := func(name, body string) {
		script := "#!" + filepath.Join(bin, "bash") + "\necho \"" + name + " $*\" >>" + logPath + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("id", "echo "+uid)
	stub("sudo", `exec "$@"`)
	// apt-get install notes whether policy-rc.d keeps services from
	// starting while it runs; download leaves a .deb in the current
	// directory, as apt-get does.
	stub("apt-get", `case " $* " in
  *" install "*) "$POLICY_RC_D" >/dev/null 2>&1; echo "policy-rc.d exit $?" >>`+logPath+` ;;
  *" download "*) : >prometheus_2.42.0+ds-5_amd64.deb ;;
esac`)
	// dpkg-deb --fsys-tarfile writes the package's files as a tar stream:
	// here the one file the script wants.
	stub("dpkg-deb", `d=$(mktemp -d); mkdir -p "$d/usr/bin" "$d/usr/sbin"
printf '#!/bin/sh\necho promtool\n' >"$d/usr/bin/promtool"; printf '#!/bin/sh\n' >"$d/usr/bin/prometheus"
tar -c -C "$d" ./usr/bin/promtool ./usr/bin/prometheus; rm -rf "$d"`)
	for _, name := range present {
		stub(name, "")
	}
	for _, name := range sbin {
		if err := os.WriteFile(filepath.Join(sbinDir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(filepath.Join(bin, "bash"), "install-deps.sh")
	cmd.Env = []string{"PATH=" + bin, "POLICY_RC_D=" + policy, "PROMTOOL_DIR=" + promdir, "HOME=" + dir, "SBIN_DIRS=" + sbinDir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-deps.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(logPath)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), policy, promdir
}

// install-deps.sh installs the test tools without letting Debian start a
// service, as root and under sudo: policy-rc.d forbids it while apt-get
// installs (with sudo it was written only as root, so Debian started
// prometheus.service on :9090 and the demo could not take the port), and
// promtool comes out of the prometheus package alone, so no Prometheus
// server, user or unit is installed at all.
func TestInstallDepsStartsNoService(t *testing.T) {
	for _, tc := range []struct{ name, uid string }{{"root", "0"}, {"sudo", "1000"}} {
		t.Run(tc.name, func(t *testing.T) {
			log, policy, promdir := stubbed(t, tc.uid)
			var install string
			for i, line := range log {
				if strings.HasPrefix(line, "apt-get install") {
					install = line
					if i+1 >= len(log) || log[i+1] != "policy-rc.d exit 101" {
						t.Errorf("apt-get install ran without policy-rc.d answering 101: %q", log)
					}
				}
			}
			if install == "" {
				t.Fatalf("no apt-get install in %q", log)
			}
			for _, pkg := range []string{"redis-server", "redis-tools", "sip-tester", "kamailio", "baresip-core", "openssl", "gcc", "libc6-dev"} {
				if !slices.Contains(strings.Fields(install), pkg) {
					t.Errorf("%q: %s not installed", install, pkg)
				}
			}
			if strings.Contains(install, "prometheus") {
				t.Errorf("%q: the prometheus package (and its service) installed, want promtool alone", install)
			}
			if !slices.ContainsFunc(log, func(l string) bool {
				return strings.HasPrefix(l, "apt-get ") && strings.HasSuffix(l, "download -qq prometheus")
			}) {
				t.Errorf("promtool not taken from the prometheus package: %q", log)
			}
			if _, err := os.Stat(filepath.Join(promdir, "promtool")); err != nil {
				t.Errorf("promtool not installed in PROMTOOL_DIR: %v", err)
			}
			if _, err := os.Stat(filepath.Join(promdir, "prometheus")); err == nil {
				t.Errorf("the prometheus server was installed too")
			}
			if _, err := os.Stat(policy); !os.IsNotExist(err) {
				t.Errorf("policy-rc.d left behind after the install (%v): services could never start", err)
			}
			sudoed := slices.ContainsFunc(log, func(l string) bool { return strings.HasPrefix(l, "sudo ") })
			if sudoed != (tc.uid != "0") {
				t.Errorf("uid %s: sudo used %v, want %v: %q", tc.uid, sudoed, tc.uid != "0", log)
			}
		})
	}
}

// With every tool present the script does nothing: no apt-get, no sudo.
func TestInstallDepsNothingMissing(t *testing.T) {
	log, _, _ := stubbed(t, "1000", "redis-server", "redis-cli", "sipp", "kamailio", "baresip", "openssl", "gcc", "promtool")
	for _, line := range log {
		if strings.HasPrefix(line, "apt-get") || strings.HasPrefix(line, "sudo") {
			t.Errorf("ran %q with every tool present", line)
		}
	}
}

// Debian installs kamailio in /usr/sbin, off an ordinary user's PATH: the
// script finds it there and installs nothing, instead of running apt-get
// (and asking for sudo) on every make test.
func TestInstallDepsFindsSbinTools(t *testing.T) {
	log, _, _ := stubbedSbin(t, "1000", []string{"kamailio"}, "redis-server", "redis-cli", "sipp", "baresip", "openssl", "gcc", "promtool")
	for _, line := range log {
		if strings.HasPrefix(line, "apt-get") || strings.HasPrefix(line, "sudo") {
			t.Errorf("ran %q with kamailio installed in an sbin directory", line)
		}
	}
}
