package chart

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Publish pushes the image of a release's OCI layout tar to repository
// (for example ghcr.io/kvrouter/kvhint): the index under its tag (the
// layout's ref.name), then the SBOM by digest, its subject the index, so
// that a registry with the referrers API lists it. Credentials are the
// local keychain's (docker login, or a registry's helper). It returns the
// pushed reference, repository:tag@digest.
func Publish(layoutTar, repository string, opts ...remote.Option) (string, error) {
	dir, err := os.MkdirTemp("", "kvhint-publish-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := untarTo(layoutTar, dir); err != nil {
		return "", fmt.Errorf("%s: %w", layoutTar, err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("%s: not an OCI layout: %w", layoutTar, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return "", err
	}
	tm, err := top.IndexManifest()
	if err != nil {
		return "", err
	}
	repo, err := name.NewRepository(repository)
	if err != nil {
		return "", fmt.Errorf("repository %q: %w", repository, err)
	}
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	pushed := ""
	var sboms []v1.Descriptor
	for _, d := range tm.Manifests {
		switch tag := d.Annotations["org.opencontainers.image.ref.name"]; {
		case tag != "":
			idx, err := top.ImageIndex(d.Digest)
			if err != nil {
				return "", err
			}
			if err := remote.WriteIndex(repo.Tag(tag), idx, opts...); err != nil {
				return "", fmt.Errorf("pushing %s: %w", repo.Tag(tag), err)
			}
			pushed = repo.Tag(tag).String() + "@" + d.Digest.String()
		case d.ArtifactType == SBOMMediaType:
			sboms = append(sboms, d)
		}
	}
	if pushed == "" {
		return "", fmt.Errorf("%s: no tagged image index in index.json", layoutTar)
	}
	for _, d := range sboms {
		img, err := top.Image(d.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.Write(repo.Digest(d.Digest.String()), img, opts...); err != nil {
			return "", fmt.Errorf("pushing the SBOM %s: %w", d.Digest, err)
		}
	}
	return pushed, nil
}

// untarTo unpacks a tar of regular files and folders into dir, refusing
// names that leave it.
func untarTo(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %c not a file or folder", h.Name, h.Typeflag)
		}
	}
}
