// Command gridlink connects every process of a job spread over many sites to
// every other one, whatever firewalls, NATs and non-routed networks stand
// between them. See the README and `gridlink help`.
package main

import "github.com/gridlink/gridlink/cli"

func main() { cli.Main() }
