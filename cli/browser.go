package cli

import (
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
)

// Opening the dashboard in the user's browser. Its address holds the
// secret token, and a command's arguments are everyone's to read (ps,
// /proc/PID/cmdline), so the token goes on no command line: the address
// is written into a page that sends the browser on to it (a meta
// refresh), in a file only the user can read (mode 0600, in a new
// directory of mode 0700 in $XDG_RUNTIME_DIR, else the temporary
// directory), and xdg-open gets that file's path. The file goes when the
// dashboard stops. The address is printed to the user's terminal too.

// startBrowser starts the command argv without waiting for it; tests
// replace it to see what it would run.
var startBrowser = func(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// openBrowser opens url with xdg-open when there is one (and a display),
// through a private file, without waiting for it; the returned function
// removes the file.
func openBrowser(url string) (remove func()) {
	remove = func() {}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return remove
	}
	p, err := exec.LookPath("xdg-open")
	if err != nil {
		return remove
	}
	page, err := writeRedirect(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gridlink dashboard: not opening a browser: %v\n", err)
		return remove
	}
	remove = func() { os.RemoveAll(filepath.Dir(page)) }
	if err := startBrowser([]string{p, page}); err != nil {
		fmt.Fprintf(os.Stderr, "gridlink dashboard: not opening a browser: %v\n", err)
	}
	return remove
}

// writeRedirect writes a page that sends a browser on to url into a new
// private file and returns its path.
func writeRedirect(url string) (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(base) {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "gridlink-dashboard-") // mode 0700
	if err != nil {
		return "", err
	}
	page := filepath.Join(dir, "open.html")
	f, err := os.OpenFile(page, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	u := html.EscapeString(url)
	_, err = fmt.Fprintf(f, "<!doctype html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"0; url=%s\">\n<title>gridlink dashboard</title>\n<a href=\"%s\">gridlink dashboard</a>\n", u, u)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return page, nil
}
