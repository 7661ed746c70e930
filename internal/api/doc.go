// Package api holds the agent's wire types: the state it publishes after
// every interval (served as JSON at /api/state, exported as metrics, drawn
// by crosstalk top, read by the node signal) and the actions it records,
// with the kinds, policies and levers those actions name.
//
// Readers of the state import this package rather than the agent, so that
// they do not depend on the agent's sensors, actuators and wiring. The JSON
// shapes here are an interface: renaming a field or a constant's value
// breaks every reader of a running agent.
package api
