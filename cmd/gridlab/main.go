// Command gridlab runs the emulated grid that gridlink is tested and
// measured in: sites made of Linux network namespaces, with firewalls, NATs,
// non-routed and multi-homed hosts, joined by emulated wide-area links.
// See the README's "The lab" section, and package topology for the file
// format.
package main

import "github.com/gridlink/gridlink/internal/lab/labcli"

func main() { labcli.Main() }
