package hintsconfig

import "github.com/kvrouter/kv-hint-operator/pkg/wellknown"

// ReasonPresetOverridesParameters: a warning that a Dynamo Frontend's
// router preset (1.7's --agentic or --load-aware) takes precedence over a
// role's cost-function parameters, so the router does not run them as
// written.
const ReasonPresetOverridesParameters Reason = wellknown.ReasonPresetOverridesParameters
