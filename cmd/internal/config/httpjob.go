package config

import (
	"crypto/x509"
	"fmt"
	"os"
)

// checkCAFile reports whether the ca_file of an HTTP job holds at least
// one PEM certificate. It is read where the config is checked: a worker
// reads it again for every request, so a file missing there fails the
// attempt with the same message.
func checkCAFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read the CA file: %v", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}
