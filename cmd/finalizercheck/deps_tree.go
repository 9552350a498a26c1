package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// depsFormat names the layout and rewriting of the prepared files: a
// change to either must change it, so that older copies are not reused.
const depsFormat = "finalizercheck -deps 1"

// stampName is the file in each copy that records what it was made from.
const stampName = ".finalizercheck-stamp"

// depsTree writes the prepared build into cfg.dir:
//
//	DIR/go.mod, DIR/go.sum     the main module's, plus a replace line per rewritten module
//	DIR/mod/PATH@VERSION/...   a copy of each rewritten module, its files rewritten
//	DIR/overlay/...            rewritten files of the main module
//	DIR/overlay.json           the -overlay naming them
type depsTree struct {
	cfg     *depsConfig
	env     *goEnv
	rep     *depsReport
	actions []string // what was written or reused
	overlay bool     // whether the build needs DIR/overlay.json
}

// moduleCopy is a module some of whose files are rewritten.
type moduleCopy struct {
	mod   *listModule // as the build selects it (Dir is the source)
	dst   string
	files map[string][]byte // rewritten text, by path relative to mod.Dir
}

func (t *depsTree) write(files []*sourceFile) error {
	mods := make(map[string]*moduleCopy)
	overlay := make(map[string]string)
	for _, f := range files {
		text, err := f.rewrite()
		if err != nil {
			return err
		}
		m := f.pkg.Module
		if m.Main {
			rel, err := filepath.Rel(filepath.Dir(t.env.GOMOD), f.name)
			if err != nil {
				return err
			}
			dst := filepath.Join(t.cfg.dir, "overlay", rel)
			if err := t.writeFile(dst, text); err != nil {
				return err
			}
			overlay[f.name] = dst
			continue
		}
		dir := m.Dir
		if m.Replace != nil {
			dir = m.Replace.Dir
		}
		mc := mods[m.Path]
		if mc == nil {
			mc = &moduleCopy{mod: m, files: make(map[string][]byte),
				dst: filepath.Join(t.cfg.dir, "mod", escapePath(m.Path)+"@"+cmp.Or(m.Version, "local"))}
			mods[m.Path] = mc
		}
		rel, err := filepath.Rel(dir, f.name)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("%s is not in the directory of its module %s (%s)", f.name, m.Path, dir)
		}
		mc.files[rel] = text
	}

	paths := make([]string, 0, len(mods))
	for p := range mods {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var replaces []*moduleCopy
	for _, p := range paths {
		if err := t.copyModule(mods[p]); err != nil {
			return err
		}
		replaces = append(replaces, mods[p])
	}
	if err := t.removeStale(replaces); err != nil {
		return err
	}
	if err := t.writeGoMod(replaces); err != nil {
		return err
	}
	ov := filepath.Join(t.cfg.dir, "overlay.json")
	if len(overlay) == 0 {
		if err := os.Remove(ov); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	t.overlay = true
	b, err := json.MarshalIndent(struct{ Replace map[string]string }{overlay}, "", "\t")
	if err != nil {
		return err
	}
	return t.writeFile(ov, append(b, '\n'))
}

// writeFile writes b to name unless name holds b already, and says which.
func (t *depsTree) writeFile(name string, b []byte) error {
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, b) {
		t.actions = append(t.actions, "reused "+name)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	t.actions = append(t.actions, "wrote "+name)
	return os.WriteFile(name, b, 0o644)
}

// copyModule writes mc's copy: every file of the module, the rewritten
// ones rewritten, unless the copy's stamp shows it was made from the same
// files and rewrites.
func (t *depsTree) copyModule(mc *moduleCopy) error {
	src := mc.mod.Dir
	if mc.mod.Replace != nil {
		src = mc.mod.Replace.Dir
	}
	list, err := moduleFiles(src)
	if err != nil {
		return fmt.Errorf("copying module %s: %v", mc.mod.Path, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s@%s\n%s\n", depsFormat, mc.mod.Path, mc.mod.Version, src)
	for _, rel := range list {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return fmt.Errorf("copying module %s: %v", mc.mod.Path, err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%q %x\n", rel, sum)
		if text, ok := mc.files[rel]; ok {
			sum = sha256.Sum256(text)
			fmt.Fprintf(h, "rewritten %x\n", sum)
		}
	}
	if !slices.Contains(list, "go.mod") {
		fmt.Fprintf(h, "synthesized go.mod\n")
	}
	stamp := hex.EncodeToString(h.Sum(nil)) + "\n"
	if old, err := os.ReadFile(filepath.Join(mc.dst, stampName)); err == nil && string(old) == stamp {
		t.actions = append(t.actions, fmt.Sprintf("reused %s (%s, up to date)", mc.dst, mc.mod.Path))
		return nil
	}
	if err := os.RemoveAll(mc.dst); err != nil {
		return err
	}
	for _, rel := range list {
		b, ok := mc.files[rel]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(src, rel)); err != nil {
				return err
			}
		}
		dst := filepath.Join(mc.dst, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	if !slices.Contains(list, "go.mod") {
		// A module without go.mod (from before modules): a replacement
		// directory needs one.
		if err := os.WriteFile(filepath.Join(mc.dst, "go.mod"), []byte("module "+mc.mod.Path+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(mc.dst, stampName), []byte(stamp), 0o644); err != nil {
		return err
	}
	t.actions = append(t.actions, fmt.Sprintf("wrote %s (%s, %d files rewritten)", mc.dst, mc.mod.Path, len(mc.files)))
	return nil
}

// moduleFiles returns the files of the module whose directory is src,
// relative to it, in lexical order (as filepath.WalkDir visits them),
// leaving out version control directories and nested modules. It follows
// symbolic links as the go command does: a link to a file is a file of its
// package (its target is copied), a link to a directory may hold a
// package. A link that leads back to a directory already visited, or to
// one that holds the module, is not followed; a dangling one is left out,
// as the go command cannot use it either.
func moduleFiles(src string) ([]string, error) {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return nil, err
	}
	var list []string
	visited := map[string]bool{root: true}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name, path := e.Name(), filepath.Join(dir, e.Name())
			r := filepath.Join(rel, name)
			typ := e.Type()
			link := typ&fs.ModeSymlink != 0
			if link {
				fi, err := os.Stat(path)
				if err != nil {
					continue // dangling
				}
				typ = fi.Mode().Type()
			}
			switch {
			case typ.IsRegular():
				list = append(list, r)
			case typ.IsDir():
				if name == ".git" || name == ".hg" || name == ".svn" {
					continue
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					continue // a module of its own
				}
				if link {
					real, err := filepath.EvalSymlinks(path)
					if err != nil || visited[real] || within(root, real) {
						continue
					}
					visited[real] = true
				}
				if err := walk(path, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return list, walk(src, "")
}

// within reports whether path is dir or lies beneath it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// removeStale removes the copies under DIR/mod that an earlier run made
// (they hold a stamp) and this one no longer needs.
func (t *depsTree) removeStale(mods []*moduleCopy) error {
	keep := make(map[string]bool)
	for _, m := range mods {
		keep[m.dst] = true
	}
	root := filepath.Join(t.cfg.dir, "mod")
	var stale []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) && path == root {
			return filepath.SkipAll
		}
		if err != nil || !d.IsDir() {
			return err
		}
		if keep[path] {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, stampName)); err == nil {
			stale = append(stale, path)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, path := range stale {
		if err := os.RemoveAll(path); err != nil {
			return err
		}
		t.actions = append(t.actions, "removed "+path+" (no longer rewritten)")
	}
	return nil
}

// writeGoMod writes DIR/go.mod: the main module's go.mod with each
// rewritten module replaced by its copy; and DIR/go.sum, the main
// module's.
func (t *depsTree) writeGoMod(mods []*moduleCopy) error {
	copied := make(map[string]bool)
	var edits []string
	for _, m := range mods {
		copied[m.mod.Path] = true
		edits = append(edits, "-replace="+m.mod.Path+"="+m.dst)
	}
	return copyGoMod(t.env, t.cfg.dir, copied, edits, t.writeFile)
}

// copyGoMod writes dir/go.mod, the main module's go.mod with its relative
// replacements made absolute (the file moves), the replacements of the
// modules in drop dropped and the go mod edit flags edits applied; and
// dir/go.sum, the main module's. write writes each file.
func copyGoMod(env *goEnv, dir string, drop map[string]bool, edits []string, write func(name string, b []byte) error) error {
	orig, err := os.ReadFile(env.GOMOD)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".go.mod.new")
	if err := os.WriteFile(tmp, orig, 0o644); err != nil {
		return err
	}
	defer os.Remove(tmp)
	out, err := goCmd("mod", "edit", "-json", tmp)
	if err != nil {
		return err
	}
	var gm struct {
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &gm); err != nil {
		return fmt.Errorf("go mod edit -json: %v", err)
	}
	args := []string{"mod", "edit"}
	root := filepath.Dir(env.GOMOD)
	for _, r := range gm.Replace {
		old := r.Old.Path
		if r.Old.Version != "" {
			old += "@" + r.Old.Version
		}
		switch {
		case drop[r.Old.Path]:
			args = append(args, "-dropreplace="+old)
		case r.New.Version == "" && !filepath.IsAbs(r.New.Path):
			args = append(args, "-replace="+old+"="+filepath.Join(root, r.New.Path))
		}
	}
	args = append(args, edits...)
	if len(args) > 2 {
		if _, err := goCmd(append(args, tmp)...); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(tmp)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "go.mod"), b); err != nil {
		return err
	}
	sum, err := os.ReadFile(strings.TrimSuffix(env.GOMOD, ".mod") + ".sum")
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return write(filepath.Join(dir, "go.sum"), sum)
}

// escapePath escapes a module path as the module cache does, so that
// paths that differ only in case do not share a directory: an upper-case
// letter becomes '!' and its lower case.
func escapePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
