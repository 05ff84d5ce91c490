// Builds the sample APK: this folder's Kotlin (src/main/kotlin), manifest and resources,
// with the SDK's Android library built from ../../android (an included build: it
// cross-compiles libpsi_ffi.so with cargo-ndk, see android/README.md). Requires the Android
// SDK (compileSdk 35) and what android/ requires. Not built on the project's CI machines:
// see README.md.
import org.jetbrains.kotlin.gradle.dsl.JvmTarget

plugins {
    id("com.android.application") version "8.7.3"
    id("org.jetbrains.kotlin.android") version "2.4.21"
}

android {
    namespace = "dev.psisdk.sample.android"
    compileSdk = 35
    defaultConfig {
        applicationId = "dev.psisdk.sample.android"
        minSdk = 24
        targetSdk = 35
        versionCode = 1
        versionName = "0.1.0"
    }
    sourceSets["main"].java.srcDir("src/main/kotlin")
    sourceSets["test"].java.srcDir("src/test/kotlin")
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    testOptions {
        unitTests.isIncludeAndroidResources = true
    }
}

kotlin {
    compilerOptions { jvmTarget.set(JvmTarget.JVM_17) }
}

dependencies {
    implementation("dev.psisdk:psi-sdk-android")
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.11.0")

    testImplementation("junit:junit:4.13.2")
    testImplementation("org.robolectric:robolectric:4.17")
    testImplementation("org.jetbrains.kotlinx:kotlinx-coroutines-test:1.11.0")
}
