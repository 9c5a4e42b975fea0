// The sources of Perses for `make cluster MONITORING=1`: the server and percli with the UI
// (github.com/perses/perses, ui/ holds the UI's source and package-lock.json), and the
// plugins our dashboard uses, each a module holding its UI source and CUE schemas. Not
// built with `go build` here: build.sh copies them to a writable directory, builds the UI
// and the plugins with npm, then the server from the copy. go.sum pins every download.
module syncreplicas.io/hack/cluster/perses

go 1.25.0

require (
	github.com/perses/perses v0.51.0
	github.com/perses/plugins/prometheus v0.51.0
	github.com/perses/plugins/statchart v0.8.0
	github.com/perses/plugins/timeserieschart v0.9.1
)
