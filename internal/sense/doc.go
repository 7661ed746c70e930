// Package sense is the first stage of crosstalk's pipeline (sense → judge →
// act): one file per sensor, each reading the host through host.Host and
// producing numbers the judge turns into decisions. Sensors never write.
package sense
