// Package browsertest drives gcprobe's live page (/debug/gcprobe/) in a
// real headless Chromium over the DevTools protocol (chromedp), the way a
// person looks at it: the leaking line is the first row, the charts have a
// point per GC cycle, a click shows the site's stack, and the page asks
// nothing of any address but the probe's. It is a module of its own so
// that the root module never links a browser driver.
//
// The test finds Chromium at $GCPROBE_CHROMIUM, else as chromium (or
// chromium-browser, google-chrome) on PATH, and skips with a message
// otherwise; scripts/testenv.sh installs Debian's chromium package and
// exports GCPROBE_CHROMIUM. The screenshot goes to $GCPROBE_ARTIFACTS (a
// new temporary folder if unset); the test logs its path.
package browsertest
