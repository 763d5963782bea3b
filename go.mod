module github.com/gridlink/gridlink

go 1.26.8

require golang.org/x/sys v0.38.0 // indirect
