// Package deploy holds no Go code: it is the home of cpsguard's deployment
// files (docker-compose.yml and its cpsguard-compose.yaml, cpsguard.service
// (Type=notify, MemoryMax), prometheus/, grafana/, kubernetes/ (DaemonSet
// and its Deployment variant, PodDisruptionBudget, a privileged Pod
// Security namespace; docs/kubernetes.md)) and of the tests that keep them
// consistent with each other, with the Dockerfile and with the
// configuration schema. The tests that
// tie the dashboard and alerts to the exported metric names and labels live
// in package metrics.
package deploy
