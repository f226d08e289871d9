package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Platform is a GOOS/GOARCH pair the release builds kvhint for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// CLIPlatforms are the platforms of the kvhint archives; ImagePlatforms
// those of the image (a subset: the image's binaries are the archives').
var (
	CLIPlatforms   = []Platform{{"darwin", "amd64"}, {"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}}
	ImagePlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}
)

// stampPkg is the package whose version, commit and date the linker sets.
const stampPkg = "github.com/kvrouter/kv-hint-operator/internal/cli"

// buildKVHint builds ./cmd/kvhint of repo for p into dir and returns the
// binary's path.
func buildKVHint(repo, dir string, p Platform, version, commit, date string) (string, error) {
	return buildCommand(repo, dir, "kvhint", p, version, commit, date)
}

// buildCommand builds ./cmd/NAME of repo for p into dir and returns the
// binary's path. The build is the image's (CGO_ENABLED=0, -trimpath, no
// VCS stamping: the commit is stamped with -X) and so depends only on the
// source, the Go version and these flags: two builds of one commit are
// byte for byte the same.
func buildCommand(repo, dir, name string, p Platform, version, commit, date string) (string, error) {
	bin := filepath.Join(dir, p.OS+"_"+p.Arch, name)
	ldflags := strings.Join([]string{"-s", "-w", "-buildid=",
		"-X", stampPkg + ".version=" + version,
		"-X", stampPkg + ".commit=" + commit,
		"-X", stampPkg + ".date=" + date}, " ")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./cmd/"+name)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-trimpath", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s for %s: %w\n%s", name, p, err, out)
	}
	return bin, nil
}

// tarEntry is one file of a reproducible archive.
type tarEntry struct {
	Name string
	Mode int64
	Data []byte
}

// writeTar writes entries in order with fixed owners and mtime, so that
// the same files give the same bytes.
func writeTar(entries []tarEntry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Size: int64(len(e.Data)), ModTime: mtime,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if strings.HasSuffix(e.Name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gz compresses data with no name and no time in the header, at gzip's
// default level.
func gz(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes kvhint_VERSION_OS_ARCH.tar.gz into out: a folder of
// that name holding kvhint, README.md and CHANGELOG.md.
func writeArchive(repo, out, bin string, p Platform, version string, mtime time.Time) (string, error) {
	name := fmt.Sprintf("kvhint_%s_%s_%s", version, p.OS, p.Arch)
	exe, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	entries := []tarEntry{{Name: name + "/", Mode: 0o755}, {Name: name + "/kvhint", Mode: 0o755, Data: exe}}
	for _, doc := range []string{"README.md", "CHANGELOG.md"} {
		data, err := os.ReadFile(filepath.Join(repo, doc))
		if err != nil {
			return "", err
		}
		entries = append(entries, tarEntry{Name: name + "/" + doc, Mode: 0o644, Data: data})
	}
	t, err := writeTar(entries, mtime)
	if err != nil {
		return "", err
	}
	z, err := gz(t)
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, name+".tar.gz")
	return path, os.WriteFile(path, z, 0o644)
}
