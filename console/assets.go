package console

import "embed"

// assets are the console's pages, script and style sheet.
//
//go:embed assets
var assets embed.FS
