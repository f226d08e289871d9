// Package argocd runs config/argocd's health scripts as Argo CD runs
// them, for the tests that check what Argo CD makes of the product's
// objects and of Dynamo's DynamoGraphDeployment. Only tests import it; it
// imports gopher-lua, Argo CD's Lua, and apimachinery.
package argocd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Health runs u's health script, health-<kind>.lua of the folder scripts,
// the way Argo CD does (util/lua: a gopher-lua VM with only the package,
// base and table libraries open, the object as the global obj, numbers as
// Lua numbers) and returns hs.status and hs.message. A script that fails,
// or returns a status Argo CD turns into Unknown or a message that is not
// a string, is an error.
func Health(scripts string, u *unstructured.Unstructured) (status, message string, err error) {
	file := filepath.Join(scripts, "health-"+strings.ToLower(u.GetKind())+".lua")
	script, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	l.SetGlobal("obj", luaValue(l, u.Object))
	if err := l.DoString(string(script)); err != nil {
		return "", "", fmt.Errorf("the Argo CD health script %s for %s %s: %w", file, u.GetKind(), u.GetName(), err)
	}
	hs, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health script %s returned %s, want a table", file, l.Get(-1).Type())
	}
	st, msg := hs.RawGetString("status"), hs.RawGetString("message")
	switch st.String() {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		return "", "", fmt.Errorf("the health script %s returned status %q, which Argo CD turns into Unknown", file, st.String())
	}
	if msg.Type() != lua.LTString {
		return "", "", fmt.Errorf("the health script %s returned message %s, want a string", file, msg.Type())
	}
	return st.String(), msg.String(), nil
}

// luaValue converts an object as Argo CD's decodeValue does.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(luaValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, item := range v {
			tbl.RawSetH(lua.LString(k), luaValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}
