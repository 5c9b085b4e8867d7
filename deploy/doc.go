// Package deploy holds no code that ships: it tests the deployment files
// beside it (the systemd units in systemd/, the Kubernetes manifests in
// kubernetes/ and the container image of Containerfile) against the real
// muster command, built from the repository by the tests. It is a module
// of its own so that the main module never depends on Kubernetes' API or
// on an image library.
package deploy
