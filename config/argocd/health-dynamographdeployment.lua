-- Argo CD health check for nvidia.com/DynamoGraphDeployment (Dynamo
-- publishes none). Healthy: Ready=True for the current generation (Dynamo's
-- operator sets status.observedGeneration at the end of every reconcile,
-- Ready or not). Degraded: status.state "failed". Progressing: the operator
-- has not processed the current generation yet, or a component is not
-- ready (a rolling update included). Uses only Lua's base library, which is
-- all Argo CD opens for a health check.
local hs = {}
local generation = obj.metadata.generation or 0
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for Dynamo's operator to process generation " .. generation
  return hs
end
local ready = nil
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Ready" then
    ready = c
  end
end
if obj.status.state == "failed" then
  hs.status = "Degraded"
  if ready ~= nil then
    hs.message = "failed: " .. (ready.reason or "") .. ": " .. (ready.message or "")
  else
    hs.message = "failed"
  end
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ready.reason or "Ready"
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
else
  hs.message = "Waiting for the Ready condition (state " .. (obj.status.state or "unknown") .. ")"
end
return hs
